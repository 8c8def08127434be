//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpudra/gpudra/internal/plugin/slice"
	"github.com/gpudra/gpudra/internal/shared/compat"
	"github.com/gpudra/gpudra/test/fakedriver"
	"github.com/gpudra/gpudra/test/fmsim"
	"github.com/gpudra/gpudra/test/localcluster"
)

// fmNode runs NVSwitch Fabric Manager in shared NVSwitch mode
// (fakedriver.FMProfilePath: an 8-GPU HGX board).
const fmNode = "gpu-fm"

// TestFabricManagerPartitions runs NVIDIA's FabricManagerPartitioning on the
// local cluster: a node whose driver root holds the simulated libnvfm and
// its socket, added with a node group whose plugin has
// --fabric-manager-partitioning, publishes gpuModuleID and partition<N> on
// its GPUs; a claim of four GPUs constrained to one partition4 prepares,
// which activates that partition in the simulated Fabric Manager (its state
// file in the node's root), and its unprepare deactivates it; a claim of
// two GPUs that form no partition fails to prepare with the reason. The
// same in NVIDIA compatibility mode (attributes under gpu.nvidia.com). Only
// the simulated libnvfm: no real NVSwitch system has run it.
func TestFabricManagerPartitions(t *testing.T) {
	keepFailure(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	t.Cleanup(func() { clusterCmd(t, "remove-node", fmNode) })
	if err := realCluster.AddNode(ctx, localcluster.NodeSpec{Name: fmNode,
		Profile: filepath.Join(repoRoot, fakedriver.FMProfilePath)}, "--fabric-manager-partitioning"); err != nil {
		t.Fatalf("add-node %s with --fabric-manager-partitioning: %v", fmNode, err)
	}
	t.Run("gpudra", func(t *testing.T) { partitionsAndBack(t, compat.Default().GPUClass) })
	t.Run("nvidia", func(t *testing.T) {
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer ccancel()
		t.Cleanup(func() {
			if err := realCluster.InstallDriver(context.Background()); err != nil {
				t.Errorf("reinstalling the native chart: %v", err)
			}
			removeOtherDriversClasses(t, compat.NVIDIADriverName)
		})
		if err := realCluster.InstallDriver(cctx, "compatibility=nvidia"); err != nil {
			t.Fatalf("install in NVIDIA compatibility mode: %v", err)
		}
		prev := driver
		driver = compat.NVIDIADriverName
		t.Cleanup(func() { driver = prev })
		names := compat.MustResolve(compat.Flags{Compatibility: "nvidia"})
		waitDeviceClass(t, names.GPUClass)
		partitionsAndBack(t, names.GPUClass)
	})
}

// partitionsAndBack checks the node's partition attributes (driver's),
// runs a pod with four GPUs of one partition4 and follows the simulated
// Fabric Manager's active partitions through prepare and unprepare, then
// sees a claim of two GPUs that form no partition refused.
func partitionsAndBack(t *testing.T, gpuClass string) {
	byModule := waitPartitionAttributes(t)

	ns := namespace(t)
	four := partitionClaim("four", gpuClass, 4, "", fmt.Sprintf("%s/%s", driver, slice.PartitionAttribute(4)))
	if _, err := client.ResourceV1().ResourceClaims(ns).Create(context.Background(), four, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createPod(t, ns, "four", fmNode, "four", "echo end-of-report")
	waitRunning(t, ns, "four")
	claim, err := client.ResourceV1().ResourceClaims(ns).Get(context.Background(), "four", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var modules []int
	for _, r := range claim.Status.Allocation.Devices.Results {
		m, ok := byModule[r.Device]
		if r.Pool != fmNode || !ok {
			t.Fatalf("claim four got %s/%s, want a GPU of %s (%v)", r.Pool, r.Device, fmNode, byModule)
		}
		modules = append(modules, m)
	}
	slices.Sort(modules)
	// The 8-GPU board's two four-GPU partitions: 1 (modules 1-4), 2 (5-8).
	want := map[string][]int{"[1 2 3 4]": {1}, "[5 6 7 8]": {2}}[fmt.Sprint(modules)]
	if want == nil {
		t.Fatalf("claim four got GPU modules %v, not one of the board's four-GPU partitions", modules)
	}
	waitActivePartitions(t, want)

	deletePod(t, ns, "four")
	deleteClaim(t, ns, "four")
	waitActivePartitions(t, nil)

	// Modules 1 and 2 are in no two-GPU partition ({1,3}, {2,4}, {5,7}, {6,8}).
	sel := fmt.Sprintf("device.attributes[%q].%s in [1, 2]", driver, slice.AttrGPUModuleID)
	if _, err := client.ResourceV1().ResourceClaims(ns).Create(context.Background(),
		partitionClaim("apart", gpuClass, 2, sel, ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createPod(t, ns, "apart", fmNode, "apart", "echo end-of-report")
	waitPrepareFailure(t, ns, "apart", "do not form an NVSwitch Fabric Manager partition")
	waitActivePartitions(t, nil)
	deletePod(t, ns, "apart")
	deleteClaim(t, ns, "apart")
}

// partitionClaim is a claim of count GPUs of class on fmNode, with the CEL
// selector sel and a matchAttribute constraint on attr where they are set.
func partitionClaim(name, class string, count int64, sel, attr string) *resourceapi.ResourceClaim {
	req := resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}}
	if sel != "" {
		req.Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: sel}}}
	}
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{req}}}}
	if attr != "" {
		q := resourceapi.FullyQualifiedName(attr)
		c.Spec.Devices.Constraints = []resourceapi.DeviceConstraint{{Requests: []string{"gpu"}, MatchAttribute: &q}}
	}
	return c
}

// waitPartitionAttributes waits until fmNode publishes its eight GPUs with
// gpuModuleID and partition1, 2, 4 and 8, and returns their modules by
// device name.
func waitPartitionAttributes(t *testing.T) map[string]int {
	t.Helper()
	var byModule map[string]int
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
			FieldSelector: "spec.driver=" + driver + ",spec.nodeName=" + fmNode})
		if err != nil {
			return false, nil
		}
		byModule = map[string]int{}
		for _, s := range list.Items {
			for _, d := range s.Spec.Devices {
				m := d.Attributes[slice.AttrGPUModuleID].IntValue
				if typ := d.Attributes[slice.AttrType].StringValue; m == nil || typ == nil || *typ != slice.DeviceTypeGPU {
					continue // MIG devices carry their GPU's module in the native mode, and no partition
				}
				for _, n := range []int{1, 2, 4, 8} {
					if d.Attributes[slice.PartitionAttribute(n)].IntValue == nil {
						last = fmt.Sprintf("device %s has no %s", d.Name, slice.PartitionAttribute(n))
						return false, nil
					}
				}
				byModule[d.Name] = int(*m)
			}
		}
		last = fmt.Sprintf("%d GPUs with a module ID", len(byModule))
		return len(byModule) == 8, nil
	})
	if err != nil {
		t.Fatalf("%s (driver %s) never published eight GPUs with gpuModuleID and partition1/2/4/8: %s: %v", fmNode, driver, last, err)
	}
	return byModule
}

// waitActivePartitions waits until the simulated Fabric Manager of fmNode
// has exactly the partitions want active (its state file in the node's
// driver root).
func waitActivePartitions(t *testing.T, want []int) {
	t.Helper()
	path := filepath.Join(driverRoot(fmNode), fmsim.StatePath)
	var got []int
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		st, err := fmsim.ReadState(path)
		if err != nil {
			return false, nil
		}
		got = st.Active
		slices.Sort(got)
		return slices.Equal(got, want), nil
	})
	if err != nil {
		t.Fatalf("active Fabric Manager partitions on %s: %v, want %v", fmNode, got, want)
	}
	t.Logf("%s: active partitions %v", fmNode, got)
}
