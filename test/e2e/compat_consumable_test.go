//go:build e2e

package e2e

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/internal/shared/compat"
)

// TestNVIDIAConsumableShares installs the chart with compatibility=nvidia
// and NVIDIA's value consumableShares in each of its modes, and runs
// NVIDIA-format manifests (testdata/nvidia/consumable-*.yaml) pinned to a
// node with one GPU: in every mode the replicas each get a share
// (ShareID) of that one GPU; a share of memory is held to it by an MPS
// limit, a share of no memory runs without MPS; with a count of 4 a fifth
// replica stays Pending. One reinstall per mode (with static MIG); the
// native chart is installed again at the end.
func TestNVIDIAConsumableShares(t *testing.T) {
	const node = "nv-share"
	clusterCmd(t, "add-node", node+"="+filepath.Join(repoRoot, "test", "localcluster", "profiles", "h100x1.yaml"))
	t.Cleanup(func() { clusterCmd(t, "remove-node", node) })
	t.Cleanup(func() {
		if err := realCluster.InstallDriver(context.Background()); err != nil {
			t.Errorf("reinstalling the native chart: %v", err)
		}
		removeOtherDriversClasses(t, compat.NVIDIADriverName)
	})
	prev := driver
	driver = compat.NVIDIADriverName
	t.Cleanup(func() { driver = prev })
	install := func(t *testing.T, mode string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		// Static MIG, NVIDIA's mode without its DynamicMIG gate: the plugin
		// refuses shares with the local cluster's default --mig=dynamic.
		if err := realCluster.InstallDriver(ctx, "compatibility=nvidia", "consumableShares="+mode, "kubeletPlugin.mig=static"); err != nil {
			t.Fatalf("install with compatibility=nvidia consumableShares=%s: %v", mode, err)
		}
	}

	t.Run("memory", func(t *testing.T) {
		install(t, "memory")
		ns := namespace(t) // its pods are gone before the next install
		applyYAML(t, ns, pinnedTo(t, nvidiaManifest(t, "consumable-memory.yaml"), node))
		for _, s := range sharesOfOneGPU(t, ns, node, waitDeployment(t, ns, "app=consumable-memory", 2)) {
			assertConsumed(t, s.result, "memory", "4Gi")
			if got := getenv(t, injection(t, s.pod, "ctr"), "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"); got != "0=4096M" {
				t.Errorf("%s: a 4Gi share is held to it by an MPS limit of 4096M, got %q", s.pod.Name, got)
			}
		}
	})

	t.Run("unlimited", func(t *testing.T) {
		install(t, "unlimited")
		ns := namespace(t)
		applyYAML(t, ns, pinnedTo(t, nvidiaManifest(t, "consumable-unlimited.yaml"), node))
		for _, s := range sharesOfOneGPU(t, ns, node, waitDeployment(t, ns, "app=consumable-unlimited", 3)) {
			assertConsumed(t, s.result, "memory", "0")
			if v, ok := injection(t, s.pod, "ctr").Getenv("CUDA_MPS_PIPE_DIRECTORY"); ok {
				t.Errorf("%s: a share of no memory runs without an MPS daemon, but has CUDA_MPS_PIPE_DIRECTORY=%s", s.pod.Name, v)
			}
		}
	})

	t.Run("count", func(t *testing.T) {
		install(t, "4")
		ns := namespace(t)
		// Four shares fill the GPU: one at a time (applySharesOneByOne).
		pods := applySharesOneByOne(t, ns, pinnedTo(t, nvidiaManifest(t, "consumable-shares.yaml"), node), "consumable-shares", "app=consumable-shares", 4)
		for _, s := range sharesOfOneGPU(t, ns, node, pods) {
			assertConsumed(t, s.result, "shares", "1")
			assertConsumed(t, s.result, "memory", "0")
		}
		assertNextReplicaPending(t, ns, "consumable-shares", "app=consumable-shares", 4)
	})
}

// pinnedTo returns the manifest with its Deployments' pods restricted to
// node (kubernetes.io/hostname), so that they find only its GPU.
func pinnedTo(t *testing.T, manifest, node string) string {
	t.Helper()
	return editManifest(t, manifest, func(obj map[string]any) {
		if obj["kind"] == "Deployment" {
			podSpec := obj["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
			podSpec["nodeSelector"] = map[string]any{"kubernetes.io/hostname": node}
		}
	})
}

// editManifest decodes each object of a multi-document manifest, lets edit
// change it, and encodes them again.
func editManifest(t *testing.T, manifest string, edit func(obj map[string]any)) string {
	t.Helper()
	var out []byte
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	for {
		obj := map[string]any{}
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("manifest: %v", err)
		}
		if len(obj) == 0 {
			continue
		}
		edit(obj)
		b, err := yaml.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		out = append(append(out, "---\n"...), b...)
	}
	return string(out)
}

// share is a pod and the allocation of its one claim.
type share struct {
	pod    *v1.Pod
	result resourceapi.DeviceRequestAllocationResult
}

// sharesOfOneGPU checks that the pods run on node, each with a share of
// their own (a distinct ShareID) of the same GPU, which their containers
// see, and returns their allocations.
func sharesOfOneGPU(t *testing.T, ns, node string, pods []v1.Pod) []share {
	t.Helper()
	var out []share
	ids := map[string]string{}
	var uuid, device string
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName != node {
			t.Fatalf("pod %s on %s, want %s", p.Name, p.Spec.NodeName, node)
		}
		claim, err := client.ResourceV1().ResourceClaims(ns).Get(context.Background(), podClaimNames(p)[0], metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r := claim.Status.Allocation.Devices.Results[0]
		if r.ShareID == nil {
			t.Fatalf("%s: the allocation of %s has no ShareID: not a consumable share", p.Name, r.Device)
		}
		if other, ok := ids[string(*r.ShareID)]; ok {
			t.Errorf("%s and %s have the same ShareID %s", p.Name, other, *r.ShareID)
		}
		ids[string(*r.ShareID)] = p.Name
		seen := assertSeesAllocation(t, ns, p.Name, "ctr")
		if len(seen) != 1 {
			t.Fatalf("%s sees %v, want one GPU", p.Name, seen)
		}
		if uuid == "" {
			uuid, device = seen[0].uuid, r.Device
		}
		if seen[0].uuid != uuid || r.Device != device {
			t.Errorf("%s has %s (%s), want the one GPU of %s, %s (%s)", p.Name, r.Device, seen[0].uuid, node, device, uuid)
		}
		out = append(out, share{pod: p, result: r})
	}
	return out
}

func assertConsumed(t *testing.T, r resourceapi.DeviceRequestAllocationResult, name resourceapi.QualifiedName, want string) {
	t.Helper()
	got, ok := r.ConsumedCapacity[name]
	if w := resource.MustParse(want); !ok || got.Cmp(w) != 0 {
		t.Errorf("allocation of %s consumed %s=%s (recorded: %v), want %s", r.Device, name, got.String(), ok, want)
	}
}

// assertNextReplicaPending scales the Deployment to one more replica than
// the running ones and checks that the scheduler finds no room for it.
func assertNextReplicaPending(t *testing.T, ns, deployment, selector string, running int) {
	t.Helper()
	if out, err := kubectl("-n", ns, "scale", "deployment/"+deployment, "--replicas="+strconv.Itoa(running+1)); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=FailedScheduling"})
		return err == nil && len(evs.Items) > 0, nil
	})
	if err != nil {
		out, _ := kubectl("-n", ns, "get", "pods", "-o", "wide")
		t.Fatalf("replica %d should not fit (no FailedScheduling event)\n%s", running+1, out)
	}
	time.Sleep(2 * time.Second)
	if got := listPods(t, ns, selector, v1.PodRunning); len(got) != running {
		t.Errorf("exactly %d replicas fit, %d run", running, len(got))
	}
}
