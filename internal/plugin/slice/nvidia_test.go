package slice_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gpudra/gpudra/internal/controller/deviceclass"
	"github.com/gpudra/gpudra/internal/plugin/mig"
	"github.com/gpudra/gpudra/internal/plugin/slice"
	"github.com/gpudra/gpudra/internal/shared/compat"
)

// nvidiaSlices publishes a simulated node as the plugin does in the NVIDIA
// compatibility mode.
func nvidiaSlices(t *testing.T, profile string, mode mig.Mode) []*resourceapi.ResourceSlice {
	t.Helper()
	node := simNode(t, profile, "n1")
	mig.Apply(node, mode)
	res, err := slice.Resources("n1", node, slice.Options{NVIDIAAttributes: true})
	require.NoError(t, err)
	var out []*resourceapi.ResourceSlice
	for _, s := range slice.Objects(compat.NVIDIADriverName, "n1", res) {
		out = append(out, &s)
	}
	return out
}

func TestNVIDIAAttributes(t *testing.T) {
	for _, tc := range []struct {
		profile string
		mode    mig.Mode
	}{{"testdata/static-mig.yaml", mig.ModeStatic}, {"dgx-h100", mig.ModeDynamic}} {
		t.Run(tc.profile, func(t *testing.T) {
			migs := 0
			for _, s := range nvidiaSlices(t, tc.profile, tc.mode) {
				for _, d := range s.Spec.Devices {
					// NVIDIA's driver publishes only the standard PCI bus ID
					// attribute (its pcieBusID is gone at 9593204), MIG devices
					// their parent's.
					assert.NotContains(t, d.Attributes, resourceapi.QualifiedName("pcieBusID"), "%s has no pcieBusID", d.Name)
					assert.NotNil(t, d.Attributes["resource.kubernetes.io/pciBusID"].StringValue, "%s has the standard pciBusID", d.Name)
					assert.NotNil(t, d.Attributes[slice.AttrCUDAComputeCapability].VersionValue, "cudaComputeCapability is a version")
					assert.NotNil(t, d.Attributes[slice.AttrDriverVersion].VersionValue, "driverVersion is a version")
					assert.NotNil(t, d.Attributes[slice.AttrCUDADriverVersion].VersionValue, "cudaDriverVersion is a version")
					// gpuModuleID only with NVIDIA's FabricManagerPartitioning gate.
					assert.NotContains(t, d.Attributes, slice.AttrGPUModuleID, "%s has no gpuModuleID", d.Name)
					if *d.Attributes[slice.AttrType].StringValue != "mig" {
						assert.NotNil(t, d.Attributes[slice.AttrIndex].IntValue)
						continue
					}
					migs++
					assert.NotContains(t, d.Attributes, slice.AttrIndex, "MIG devices have no index")
					assert.NotContains(t, d.Attributes, slice.AttrMinor, "MIG devices have no minor")
					slices := 0
					for name, c := range d.Capacity {
						if strings.HasPrefix(string(name), "memorySlice") {
							slices++
							assert.Equal(t, int64(1), c.Value.Value())
						}
					}
					start := int(*d.Attributes[slice.AttrPlacementStart].IntValue)
					assert.Contains(t, d.Capacity, slice.MemorySliceCapacity(start), "%s starts at memory slice %d", d.Name, start)
					assert.Positive(t, slices, "%s has memory slices", d.Name)
					for _, n := range []string{"multiprocessors", "copyEngines", "decoders", "encoders", "jpegEngines", "ofaEngines", "memory"} {
						assert.Contains(t, d.Capacity, resourceapi.QualifiedName(n))
					}
				}
			}
			assert.Positive(t, migs)
		})
	}
}

// NVIDIA-format claims (their classes, their CEL, matchAttribute on
// gpu.nvidia.com/parentUUID) allocate on the compatibility mode's slices
// with the scheduler's allocator, and not on native slices.
func TestNVIDIAClaimsAllocate(t *testing.T) {
	nv := compat.MustResolve(compat.Flags{Compatibility: "nvidia"})
	lister := classLister{}
	for _, c := range deviceclass.BaseClassesFor(nv, "") {
		lister[c.Name] = c
	}
	ctx := context.Background()
	allocate := func(slices []*resourceapi.ResourceSlice, claim *resourceapi.ResourceClaim) []resourceapi.DeviceRequestAllocationResult {
		a, err := structured.NewAllocator(ctx, structured.Features{PrioritizedList: true, PartitionableDevices: true},
			structured.AllocatedState{AllocatedDevices: sets.New[structured.DeviceID](), AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
				AggregatedCapacity: structured.NewConsumedCapacityCollection()},
			lister, slices, cel.NewCache(10, cel.Features{}))
		require.NoError(t, err)
		results, err := a.Allocate(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, []*resourceapi.ResourceClaim{claim})
		require.NoError(t, err)
		if len(results) == 0 {
			return nil
		}
		return results[0].Devices.Results
	}
	migPair := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "mig-pair", UID: "uid-mig-pair"}}
	migPair.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "mig", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: "mig.nvidia.com", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 2,
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: `device.attributes['gpu.nvidia.com'].profile == '1g.10gb' && ` +
				`device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('9Gi')) >= 0`}}}}}}
	migPair.Spec.Devices.Constraints = []resourceapi.DeviceConstraint{{Requests: []string{"mig"}, MatchAttribute: ptr(resourceapi.FullyQualifiedName("gpu.nvidia.com/parentUUID"))}}
	gpu := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "gpu", UID: "uid-gpu"}}
	gpu.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: "gpu.nvidia.com", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: `device.attributes['resource.kubernetes.io'].pciBusID == '0000:43:00.0' && ` +
				`device.attributes['gpu.nvidia.com'].cudaComputeCapability.compareTo(semver('9.0.0')) >= 0`}}}}}}

	slices := nvidiaSlices(t, "testdata/static-mig.yaml", mig.ModeStatic)
	got := allocate(slices, migPair)
	require.Len(t, got, 2)
	for _, r := range got {
		assert.Equal(t, compat.NVIDIADriverName, r.Driver)
		assert.Contains(t, r.Device, "-mig-1g10gb-")
	}
	got = allocate(slices, gpu)
	require.Len(t, got, 1)
	assert.Equal(t, "gpu-1", got[0].Device)

	native := cluster(t, map[string]string{"n1": "testdata/static-mig.yaml"})
	assert.Empty(t, allocate(native, gpu), "NVIDIA's classes do not select gpudra's native devices")
}

func ptr[T any](v T) *T { return &v }
