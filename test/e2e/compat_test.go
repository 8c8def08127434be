//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpudra/gpudra/internal/shared/compat"
)

// nvidiaManifest reads one of the NVIDIA-format manifests of testdata/nvidia.
func nvidiaManifest(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "nvidia", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestNVIDIACompatibility installs the chart with compatibility=nvidia and
// runs manifests in the format of NVIDIA's DRA driver unchanged: a GPU per
// pod, a claim shared by two containers and by two pods, two MIG devices on
// one parent (matchAttribute gpu.nvidia.com/parentUUID), and GpuConfig time
// slicing and MPS. The native chart is installed again at the end (later
// tests run on it).
func TestNVIDIACompatibility(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	t.Cleanup(func() {
		if err := realCluster.InstallDriver(context.Background()); err != nil {
			t.Errorf("reinstalling the native chart: %v", err)
		}
		removeOtherDriversClasses(t, compat.NVIDIADriverName)
	})
	if err := realCluster.InstallDriver(ctx, "compatibility=nvidia"); err != nil {
		t.Fatalf("install in NVIDIA compatibility mode: %v", err)
	}
	prev := driver
	driver = compat.NVIDIADriverName
	t.Cleanup(func() { driver = prev })
	ns := namespace(t) // cleaned up before the native chart returns

	t.Run("gpus", func(t *testing.T) {
		applyYAML(t, ns, nvidiaManifest(t, "gpus.yaml"))
		waitRunning(t, ns, "own-gpu-a", "own-gpu-b", "two-containers", "shared-a", "shared-b")
		a := assertSeesAllocation(t, ns, "own-gpu-a", "ctr")
		b := assertSeesAllocation(t, ns, "own-gpu-b", "ctr")
		if len(a) != 1 || len(b) != 1 || a[0].uuid == b[0].uuid {
			t.Errorf("own-gpu-a and own-gpu-b must each see one GPU of their own: %v, %v", a, b)
		}
		first := assertSeesAllocation(t, ns, "two-containers", "first")
		second := assertSeesAllocation(t, ns, "two-containers", "second")
		if len(first) != 1 || len(second) != 1 || first[0].uuid != second[0].uuid {
			t.Errorf("both containers must see the claim's one GPU: %v, %v", first, second)
		}
		sa := assertSeesAllocation(t, ns, "shared-a", "ctr")
		sb := assertSeesAllocation(t, ns, "shared-b", "ctr")
		if len(sa) != 1 || len(sb) != 1 || sa[0].uuid != sb[0].uuid {
			t.Errorf("both pods must see the shared claim's one GPU: %v, %v", sa, sb)
		}
		for _, p := range []string{"own-gpu-a", "own-gpu-b", "two-containers", "shared-a", "shared-b"} {
			deletePod(t, ns, p)
		}
	})

	t.Run("mig", func(t *testing.T) {
		applyYAML(t, ns, nvidiaManifest(t, "mig.yaml"))
		waitRunning(t, ns, "mig")
		p := pod(t, ns, "mig")
		names := podClaimNames(p)
		if len(names) != 1 {
			t.Fatalf("mig pod claims %v", names)
		}
		c, err := client.ResourceV1().ResourceClaims(ns).Get(ctx, names[0], metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		results := c.Status.Allocation.Devices.Results
		if len(results) != 2 {
			t.Fatalf("allocation %v, want two MIG devices", results)
		}
		parent := func(dev string) string { gpu, _, _ := strings.Cut(dev, "-mig-"); return gpu }
		if parent(results[0].Device) != parent(results[1].Device) || !strings.Contains(results[0].Device, "-mig-1g10gb-") ||
			!strings.Contains(results[1].Device, "-mig-2g20gb-") {
			t.Errorf("allocation %s, %s: want a 1g.10gb and a 2g.20gb on one GPU", results[0].Device, results[1].Device)
		}
		// NVIDIA's MIG device names carry the GPU instance profile ID.
		for _, r := range results {
			if !nvidiaMIGName.MatchString(r.Device) {
				t.Errorf("MIG device %s is not named gpu-<minor>-mig-<profile>-<profileID>-<start>", r.Device)
			}
		}
		seen := containerGPUs(t, ns, "mig", "ctr")
		if len(seen) != 2 || !strings.HasPrefix(seen[0].UUID, "MIG-") || !strings.HasPrefix(seen[1].UUID, "MIG-") {
			t.Errorf("the container sees %v, want two MIG devices", seen)
		}
		deletePod(t, ns, "mig")
	})

	t.Run("sharing", func(t *testing.T) {
		applyYAML(t, ns, nvidiaManifest(t, "sharing.yaml"))
		waitRunning(t, ns, "sliced-a", "sliced-b", "mps")
		a := assertSeesAllocation(t, ns, "sliced-a", "ctr")
		b := assertSeesAllocation(t, ns, "sliced-b", "ctr")
		if len(a) != 1 || len(b) != 1 || a[0].uuid != b[0].uuid {
			t.Fatalf("both pods must see the time-sliced GPU: %v, %v", a, b)
		}
		node := pod(t, ns, "sliced-a").Spec.NodeName
		waitTimeSlice(t, node, a[0].uuid, "3") // Long
		if got := getenv(t, injection(t, pod(t, ns, "sliced-b"), "ctr"), "GPUDRA_TIMESLICE_INTERVAL"); got != "Long" {
			t.Errorf("GPUDRA_TIMESLICE_INTERVAL=%q, want Long", got)
		}
		first := assertSeesAllocation(t, ns, "mps", "first")
		second := assertSeesAllocation(t, ns, "mps", "second")
		if len(first) != 1 || len(second) != 1 || first[0].uuid != second[0].uuid {
			t.Errorf("both containers must see the MPS claim's GPU: %v, %v", first, second)
		}
		for _, ctr := range []string{"first", "second"} {
			inj := injection(t, pod(t, ns, "mps"), ctr)
			for key, want := range map[string]string{
				"CUDA_MPS_PIPE_DIRECTORY":           "/tmp/nvidia-mps",
				"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "40",
				"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT":  "0=8192M",
			} {
				if got := getenv(t, inj, key); got != want {
					t.Errorf("mps[%s]: %s=%q, want %q", ctr, key, got, want)
				}
			}
		}
		for _, p := range []string{"sliced-a", "sliced-b", "mps"} {
			deletePod(t, ns, p)
		}
		waitTimeSlice(t, node, a[0].uuid, "0")
	})

	t.Run("attributes", compatAttributes)
	t.Run("MPS settings as NVIDIA validates them", func(t *testing.T) { compatMPSSettings(t, ns) })
	t.Run("an MPS daemon per configuration group", func(t *testing.T) { compatMPSGroups(t, ns) })
	t.Run("health taints are NVIDIA's", compatTaints)
	t.Run("NVIDIA's leftover CDI specs are removed", compatLeftoverCDISpec)

	t.Run("unsupported configuration is named", func(t *testing.T) {
		out, err := kubectlApply(t, ns, `apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: vfio}
spec:
  devices:
    requests:
    - {name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}
    config:
    - opaque:
        driver: gpu.nvidia.com
        parameters: {apiVersion: resource.nvidia.com/v1beta1, kind: VfioDeviceConfig}
`)
		if err == nil || !strings.Contains(out, "VfioDeviceConfig is not supported") {
			t.Errorf("a VfioDeviceConfig claim: err %v, output %s; want the webhook to refuse it by name", err, out)
		}
	})

	// Last: it reinstalls the chart with another taint schema.
	t.Run("gpudra's taints as an opt-in", compatGpudraTaints)
}

// removeOtherDriversClasses does what docs/nvidia-compatibility.md tells an
// operator switching the chart from one driver name to the other: delete the
// DeviceClasses kept for the old name (they map the same extended resources,
// nvidia.com/gpu and nvidia.com/mig-*, and the scheduler may pick one whose
// driver no longer runs) and wait until no ResourceSlice of it is left.
func removeOtherDriversClasses(t *testing.T, oldDriver string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	classes, err := client.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Errorf("list DeviceClasses: %v", err)
		return
	}
	domain := strings.TrimPrefix(oldDriver, "gpu.")
	for _, c := range classes.Items {
		if strings.HasSuffix(c.Name, "."+domain) {
			if err := client.ResourceV1().DeviceClasses().Delete(ctx, c.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("delete DeviceClass %s: %v", c.Name, err)
			}
		}
	}
	// kube-scheduler's extended-resource cache (k8s.io/dynamic-resource-
	// allocation v0.37) drops the mapping of an extended resource when any
	// class naming it is deleted, although the remaining class names it too:
	// until that class changes, pods asking for nvidia.com/gpu fail with
	// "Insufficient nvidia.com/gpu". Touching the remaining classes maps them
	// again (docs/nvidia-compatibility.md says so).
	classes, err = client.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Errorf("list DeviceClasses: %v", err)
		return
	}
	patch := []byte(`{"metadata":{"annotations":{"gpudra.io/extended-resource-remapped":"` + time.Now().UTC().Format(time.RFC3339Nano) + `"}}}`)
	for _, c := range classes.Items {
		if c.Spec.ExtendedResourceName != nil {
			if _, err := client.ResourceV1().DeviceClasses().Patch(ctx, c.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				t.Errorf("touch DeviceClass %s: %v", c.Name, err)
			}
		}
	}
	err = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		slices, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + oldDriver})
		if err != nil || len(slices.Items) == 0 {
			return err == nil, nil
		}
		// The kubelet removes a deregistered driver's slices after a grace
		// period; an operator may delete them at once.
		for _, s := range slices.Items {
			_ = client.ResourceV1().ResourceSlices().Delete(ctx, s.Name, metav1.DeleteOptions{})
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("ResourceSlices of %s left after switching back: %v", oldDriver, err)
	}
}
