//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpudra/gpudra/test/visiblegpus"
)

// driver is the driver the e2e helpers look at (TestNVIDIACompatibility
// switches it while the chart runs in the NVIDIA compatibility mode).
var driver = "gpu.gpudra.io"

// namespace creates a fresh namespace for one test and deletes it after.
func namespace(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("e2e-%s-%d", strings.ToLower(regexp.MustCompile(`[^a-zA-Z0-9]+`).ReplaceAllString(t.Name(), "-")), time.Now().UnixNano()%100000)
	if len(name) > 60 {
		name = name[len(name)-60:]
		name = strings.TrimLeft(name, "-")
	}
	_, err := client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	if apiserverOnly {
		// No controller-manager makes the default ServiceAccount.
		sa := &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
		if _, err := client.CoreV1().ServiceAccounts(name).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create the default ServiceAccount: %v", err)
		}
	}
	t.Cleanup(func() {
		_ = client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
		// Wait for the pods to go so later tests start from free GPUs.
		_ = wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			pods, err := client.CoreV1().Pods(name).List(ctx, metav1.ListOptions{})
			return err == nil && len(pods.Items) == 0, nil
		})
	})
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("default ServiceAccount in %s never appeared: %v", name, err)
	}
	// Registered after the namespace's deletion, so it runs before it:
	// the failure's pods are still there.
	keepFailure(t)
	return name
}

// applySpec applies a demo spec into ns (its objects say namespace: demo).
func applySpec(t *testing.T, ns, path string) {
	t.Helper()
	applyYAML(t, ns, specManifest(t, ns, path))
}

// specManifest returns a demo spec with its objects moved into ns.
func specManifest(t *testing.T, ns, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(string(data), "namespace: demo", "namespace: "+ns)
}

func applyYAML(t testing.TB, ns, manifest string) {
	t.Helper()
	if out, err := kubectlApply(t, ns, manifest); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
}

func waitRunning(t *testing.T, ns string, names ...string) {
	t.Helper()
	for _, name := range names {
		err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			return p.Status.Phase == v1.PodRunning, nil
		})
		if err != nil {
			out, _ := kubectl("-n", ns, "describe", "pod", name)
			t.Fatalf("pod %s/%s not Running: %v\n%s", ns, name, err, out)
		}
	}
}

func pod(t *testing.T, ns, name string) *v1.Pod {
	t.Helper()
	p, err := client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// seenGPU is one "GPU i: <product> (UUID: <uuid>)" line of a container log,
// written by gpudra-gpus (the workload image) from what CDI injected.
type seenGPU struct{ Product, UUID string }

var gpuLine = regexp.MustCompile(`^GPU \d+: (.+) \(UUID: (\S+)\)$`)

func containerGPUs(t *testing.T, ns, podName, container string) []seenGPU {
	t.Helper()
	// The container runs gpudra-gpus (the workload image), which prints
	// UUID lines or an error naming itself.
	return parseContainerGPUs(waitLogs(t, ns, podName, container, gpusPrinted))
}

// gpusPrinted: gpudra-gpus printed its GPU lines or its error.
func gpusPrinted(out string) bool {
	return strings.Contains(out, "(UUID: ") || strings.Contains(out, "gpudra-gpus:")
}

// waitLogs waits up to 30 s until the container's log satisfies done and
// returns it.
func waitLogs(t *testing.T, ns, podName, container string, done func(string) bool) string {
	t.Helper()
	var out string
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		var err error
		out, err = kubectl("-n", ns, "logs", podName, "-c", container)
		return err == nil && done(out), nil
	})
	if err != nil {
		t.Fatalf("logs of %s/%s[%s]: %v\n%s", ns, podName, container, err, out)
	}
	return out
}

// migLine is a MIG device line: "MIG 1g.10gb     Device  0: (UUID: MIG-...)"
// as nvidia-smi -L writes it, or "MIG Device 0: GI 1 CI 0 (UUID: MIG-...)"
// when the container does not know the profile.
var migLine = regexp.MustCompile(`^MIG (?:\S+ +)?Device +\d+: (?:.* )?\(UUID: (\S+)\)$`)

// parseContainerGPUs reads gpudra-gpus output: a GPU with MIG devices under
// it stands for those devices (what the claim was allocated), and a product
// name the container cannot see is left empty.
func parseContainerGPUs(out string) []seenGPU {
	var gpus []seenGPU
	parentHasMIG := false
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if m := migLine.FindStringSubmatch(line); m != nil {
			if !parentHasMIG && len(gpus) > 0 {
				gpus = gpus[:len(gpus)-1] // the parent GPU line
			}
			parentHasMIG = true
			gpus = append(gpus, seenGPU{UUID: m[1]})
			continue
		}
		if m := gpuLine.FindStringSubmatch(line); m != nil {
			parentHasMIG = false
			product := m[1]
			if product == visiblegpus.UnknownProduct {
				product = ""
			}
			gpus = append(gpus, seenGPU{Product: product, UUID: m[2]})
		}
	}
	return gpus
}

// device is a device of a ResourceSlice.
type device struct {
	node, name, uuid, product, pcieRoot string
	nvlinkDomain                        string
	numaNode                            int64 // -1: not published
}

func sliceDevices(t *testing.T) map[string]device {
	t.Helper()
	slices, err := client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]device{}
	for _, s := range slices.Items {
		if s.Spec.Driver != driver {
			continue
		}
		for _, d := range s.Spec.Devices {
			str := func(n resourceapi.QualifiedName) string {
				if v := d.Attributes[n].StringValue; v != nil {
					return *v
				}
				return ""
			}
			numa := int64(-1)
			if v := d.Attributes["resource.kubernetes.io/numaNode"].IntValue; v != nil {
				numa = *v
			}
			out[s.Spec.Pool.Name+"/"+d.Name] = device{node: s.Spec.Pool.Name, name: d.Name, uuid: str("uuid"),
				product: str("productName"), pcieRoot: str("resource.kubernetes.io/pcieRoot"),
				nvlinkDomain: str("nvlinkDomain"), numaNode: numa}
		}
	}
	return out
}

// allocatedDevices returns the devices allocated to the claims of a pod,
// sorted by UUID.
func allocatedDevices(t *testing.T, p *v1.Pod) []device {
	t.Helper()
	devices := sliceDevices(t)
	var out []device
	for _, name := range podClaimNames(p) {
		out = append(out, claimDevices(t, devices, p.Namespace, name)...)
	}
	if p.Status.ExtendedResourceClaimStatus != nil {
		out = append(out, claimDevices(t, devices, p.Namespace, p.Status.ExtendedResourceClaimStatus.ResourceClaimName)...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].uuid < out[j].uuid })
	return out
}

// podClaimNames lists the ResourceClaims a pod uses: referenced directly, or
// generated from a template (then named in the pod's status).
func podClaimNames(p *v1.Pod) []string {
	var names []string
	for _, rc := range p.Spec.ResourceClaims {
		if rc.ResourceClaimName != nil {
			names = append(names, *rc.ResourceClaimName)
			continue
		}
		for _, st := range p.Status.ResourceClaimStatuses {
			if st.Name == rc.Name && st.ResourceClaimName != nil {
				names = append(names, *st.ResourceClaimName)
			}
		}
	}
	return names
}

func claimDevices(t *testing.T, devices map[string]device, ns, name string) []device {
	c, err := client.ResourceV1().ResourceClaims(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("claim %s/%s: %v", ns, name, err)
	}
	if c.Status.Allocation == nil {
		t.Fatalf("claim %s/%s is not allocated", ns, name)
	}
	var out []device
	for _, r := range c.Status.Allocation.Devices.Results {
		d, ok := devices[r.Pool+"/"+r.Device]
		if !ok {
			t.Fatalf("claim %s/%s allocated %s/%s which no ResourceSlice lists", ns, name, r.Pool, r.Device)
		}
		out = append(out, d)
	}
	return out
}

// assertSeesAllocation checks that a container sees exactly the GPUs that
// the scheduler allocated to its pod's claims, with the right product names.
func assertSeesAllocation(t *testing.T, ns, podName, container string) []device {
	t.Helper()
	p := pod(t, ns, podName)
	want := allocatedDevices(t, p)
	got := containerGPUs(t, ns, podName, container)
	sort.Slice(got, func(i, j int) bool { return got[i].UUID < got[j].UUID })
	if len(got) != len(want) {
		t.Fatalf("%s/%s[%s] sees %d GPUs %v, allocation has %d %v", ns, podName, container, len(got), got, len(want), want)
	}
	for i := range want {
		productSeen := got[i].Product != ""
		if got[i].UUID != want[i].uuid || (productSeen && got[i].Product != want[i].product) {
			t.Fatalf("%s/%s[%s] sees %v, allocated %v", ns, podName, container, got[i], want[i])
		}
		if want[i].node != p.Spec.NodeName {
			t.Fatalf("pod on %s got a device of pool %s", p.Spec.NodeName, want[i].node)
		}
	}
	return want
}

func fileGone(t *testing.T, path string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, err := os.Stat(path)
		return os.IsNotExist(err), nil
	})
	if err != nil {
		t.Fatalf("%s still exists after the pod was deleted", path)
	}
}

func deletePod(t *testing.T, ns, name string) {
	t.Helper()
	ctx := context.Background()
	// Graceful: the kubelet stops the pod and unprepares its claims before
	// the object disappears (a force delete would free the GPU in the API
	// while the old claim is still prepared on the node).
	if err := client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	waitPodGone(t, ns, name, 2*time.Minute)
}

// waitPodGone waits until the pod no longer exists (NotFound; any other
// error is retried).
func waitPodGone(t *testing.T, ns, name string, timeout time.Duration) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s not gone within %v (unprepare stuck, or its node not deleted?): %v", ns, name, timeout, err)
	}
}
