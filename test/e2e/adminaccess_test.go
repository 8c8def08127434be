//go:build e2e

package e2e

import (
	"context"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// TestAdminAccessStaticMIG follows demo spec 19: an admin partitions two
// H100s of gpu-h100 with nvidia-smi and switches the plugin to --mig=static
// (helm upgrade); workloads take a 3g.40gb, a 1g.10gb and a whole GPU; then
// a monitoring pod whose claim asks for all GPUs and all MIG devices with
// adminAccess gets every device of the node — the scheduler's allocation
// and what its container sees — while the workloads keep theirs and keep
// running. Cleanup destroys the instances and goes back to --mig=dynamic.
func TestAdminAccessStaticMIG(t *testing.T) {
	const node = "gpu-h100"
	ctx := context.Background()
	original := nodeDevices(t, node)
	ns := namespace(t)
	if out, err := kubectl("label", "namespace", ns, "resource.kubernetes.io/admin-access=true"); err != nil {
		t.Fatalf("label namespace: %v\n%s", err, out)
	}
	pods := []string{"gpu-monitor", "train", "infer", "batch"}
	t.Cleanup(func() { restoreDynamicMIG(t, ns, node, pods, original) })

	nvidiaSMI(t, node, "-i", "0,1", "-mig", "1")
	nvidiaSMI(t, node, "mig", "-i", "0", "-cgi", "3g.40gb,1g.10gb,1g.10gb", "-C")
	nvidiaSMI(t, node, "mig", "-i", "1", "-cgi", "7g.80gb", "-C")
	if err := realCluster.InstallDriver(ctx, "kubeletPlugin.mig=static"); err != nil {
		t.Fatalf("helm upgrade to --mig=static: %v", err)
	}
	// 6 whole GPUs, and the MIG devices of GPUs 0 and 1 instead of them.
	want := []string{"1g.10gb", "1g.10gb", "3g.40gb", "7g.80gb", "gpu", "gpu", "gpu", "gpu", "gpu", "gpu"}
	all := waitNodeDevices(t, node, func(d map[string]string) bool { return reflect.DeepEqual(kinds(d), want) })
	t.Logf("static MIG on %s: %v", node, all)

	// The workloads first, the monitor once they hold their devices.
	workloads, monitor := splitSpec(t, spec("19-admin-access-monitor.yaml"), "gpu-monitor")
	applyYAML(t, ns, strings.ReplaceAll(workloads, "namespace: demo", "namespace: "+ns))
	waitRunning(t, ns, "train", "infer", "batch")
	held := map[string]string{}
	for _, name := range []string{"train", "infer", "batch"} {
		for _, d := range assertSeesAllocation(t, ns, name, "cuda") {
			held[d.name] = name
		}
	}
	if len(held) != 3 {
		t.Fatalf("the workloads hold %v, want three devices", held)
	}
	applyYAML(t, ns, strings.ReplaceAll(monitor, "namespace: demo", "namespace: "+ns))
	waitRunning(t, ns, "gpu-monitor")

	p := pod(t, ns, "gpu-monitor")
	claims := podClaimNames(p)
	if len(claims) != 1 {
		t.Fatalf("gpu-monitor has claims %v, want one", claims)
	}
	c, err := client.ResourceV1().ResourceClaims(ns).Get(ctx, claims[0], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Pool != node || !ptr.Deref(r.AdminAccess, false) {
			t.Errorf("monitor result %s/%s (request %s): adminAccess=%v, want true on %s", r.Pool, r.Device, r.Request, ptr.Deref(r.AdminAccess, false), node)
		}
		got = append(got, r.Device)
	}
	sort.Strings(got)
	if wantNames := sortedKeys(all); !reflect.DeepEqual(got, wantNames) {
		t.Fatalf("the monitor got %v, the node has %v", got, wantNames)
	}
	seen := assertSeesAllocation(t, ns, "gpu-monitor", "monitor")
	t.Logf("the monitor got and sees all %d devices of %s, %d of them held by %v", len(seen), node, len(held), held)
	for _, name := range []string{"train", "infer", "batch"} {
		if got := pod(t, ns, name); got.Status.Phase != "Running" {
			t.Errorf("workload %s is %s next to the monitor", name, got.Status.Phase)
		}
		assertSeesAllocation(t, ns, name, "cuda")
	}
}

// nodeDevices maps the devices a node's pool publishes to their MIG profile,
// or "gpu" for a whole GPU.
func nodeDevices(t *testing.T, node string) map[string]string {
	t.Helper()
	slices, err := client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, s := range slices.Items {
		if s.Spec.Driver != driver || s.Spec.Pool.Name != node {
			continue
		}
		for _, d := range s.Spec.Devices {
			kind := "gpu"
			if v := d.Attributes["profile"].StringValue; v != nil {
				kind = *v
			}
			out[d.Name] = kind
		}
	}
	return out
}

func waitNodeDevices(t *testing.T, node string, ok func(map[string]string) bool) map[string]string {
	t.Helper()
	var d map[string]string
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		d = nodeDevices(t, node)
		return ok(d), nil
	})
	if err != nil {
		t.Fatalf("%s's ResourceSlices never showed the expected devices; they have %v", node, d)
	}
	return d
}

func kinds(d map[string]string) []string {
	var out []string
	for _, k := range d {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sortedKeys(d map[string]string) []string {
	var out []string
	for k := range d {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// splitSpec splits a spec's documents into those that do not mention name
// and those that do.
func splitSpec(t *testing.T, path, name string) (without, with string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var a, b []string
	for _, doc := range strings.Split(string(data), "\n---\n") {
		if strings.Contains(doc, name) {
			b = append(b, doc)
		} else {
			a = append(a, doc)
		}
	}
	if len(a) == 0 || len(b) == 0 {
		t.Fatalf("%s: no documents with and without %q", path, name)
	}
	return strings.Join(a, "\n---\n"), strings.Join(b, "\n---\n")
}

func nvidiaSMI(t *testing.T, node string, args ...string) {
	t.Helper()
	out, err := realCluster.NvidiaSMI(context.Background(), node, args...)
	if err != nil {
		t.Fatalf("nvidia-smi on %s: %v", node, err)
	}
	t.Logf("nvidia-smi %s: %s", strings.Join(args, " "), strings.TrimSpace(out))
}

// restoreDynamicMIG puts the node back as the other tests expect it: the
// pods gone, no MIG instances, MIG mode off, the plugin on --mig=dynamic and
// the node's pool as before.
func restoreDynamicMIG(t *testing.T, ns, node string, pods []string, original map[string]string) {
	for _, name := range pods {
		deletePod(t, ns, name)
	}
	nvidiaSMI(t, node, "mig", "-i", "0,1", "-dci", "-dgi")
	nvidiaSMI(t, node, "-i", "0,1", "-mig", "0")
	if err := realCluster.InstallDriver(context.Background()); err != nil {
		t.Fatalf("helm upgrade back to the cluster's values: %v", err)
	}
	waitNodeDevices(t, node, func(d map[string]string) bool { return reflect.DeepEqual(d, original) })
	t.Logf("%s back to --mig=dynamic with %d devices", node, len(original))
}
