package slice_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gpudra/gpudra/internal/plugin/discovery"
	"github.com/gpudra/gpudra/internal/plugin/mig"
	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/internal/plugin/slice"
	"github.com/gpudra/gpudra/test/sim"
)

const migClass = "mig.gpudra.io"

var migClasses = classLister{
	gpuClass: classes[gpuClass],
	migClass: {
		ObjectMeta: metav1.ObjectMeta{Name: migClass},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: `device.driver == "gpu.gpudra.io" && device.attributes["gpu.gpudra.io"].type == "mig"`,
		}}}},
	},
}

// dynamicNode discovers a simulated node under --mig=dynamic and returns
// the NVML server too, so that allocations can be realized on it.
func dynamicNode(t *testing.T, profile string) (*model.Node, *sim.Server, []*resourceapi.ResourceSlice) {
	t.Helper()
	p, err := sim.Load(profile, nil)
	require.NoError(t, err)
	for i := range p.GPUs {
		// An A100 is dynamic only with MIG mode already on (mig.Apply).
		p.GPUs[i].MIGEnabled = p.GPUs[i].Model.MIG != nil && p.GPUs[i].Model.Architecture == nvml.DEVICE_ARCH_AMPERE
	}
	server := sim.NewServer(p, "n1")
	require.Equal(t, nvml.SUCCESS, server.Init())
	t.Cleanup(func() { _ = server.Shutdown() })
	node, err := discovery.Discover(context.Background(), server, discovery.Options{})
	require.NoError(t, err)
	mig.Apply(node, mig.ModeDynamic)
	res, err := slice.Resources("n1", node, slice.Options{})
	require.NoError(t, err)
	var out []*resourceapi.ResourceSlice
	for _, s := range slice.Objects(driverName, "n1", res) {
		out = append(out, &s)
	}
	return node, server, out
}

func allocateOne(t *testing.T, slices []*resourceapi.ResourceSlice, allocated sets.Set[structured.DeviceID], class, selector string) *resourceapi.DeviceRequestAllocationResult {
	t.Helper()
	ctx := context.Background()
	a, err := structured.NewAllocator(ctx, structured.Features{PrioritizedList: true, AdminAccess: true, PartitionableDevices: true},
		structured.AllocatedState{AllocatedDevices: allocated, AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
			AggregatedCapacity: structured.NewConsumedCapacityCollection()},
		migClasses, slices, cel.NewCache(10, cel.Features{}))
	require.NoError(t, err)
	req := &resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}
	if selector != "" {
		req.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: selector}}}
	}
	name := fmt.Sprintf("c%d", allocated.Len())
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)}}
	claim.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "r", Exactly: req}}
	results, err := a.Allocate(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, []*resourceapi.ResourceClaim{claim})
	require.NoError(t, err)
	if len(results) == 0 {
		return nil
	}
	r := results[0].Devices.Results[0]
	allocated.Insert(structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
	return &r
}

// migByName finds the profile and placement behind a published MIG device.
func migByName(node *model.Node, name string) (*model.GPU, model.MIGProfile, int, bool) {
	for i := range node.GPUs {
		g := &node.GPUs[i]
		if g.MIG == nil {
			continue
		}
		for _, p := range g.MIG.Profiles {
			for _, s := range p.Placements {
				if model.MIGDeviceName(g, p.Name, p.ID, s) == name {
					return g, p, s, true
				}
			}
		}
	}
	return nil, model.MIGProfile{}, 0, false
}

// TestDynamicMIGAllocationsAreRealizable lets the scheduler's allocator hand
// out MIG devices of mixed profiles until a GPU is full, and creates every
// allocated device in the simulated NVML, which enforces the real placement
// rules: if the counters ever allowed an overlap, NVML would refuse it.
func TestDynamicMIGAllocationsAreRealizable(t *testing.T) {
	for _, tc := range []struct {
		profile  string
		sequence []string // profiles requested in turn, on GPU 0
		fits     int      // how many of them the allocator grants
	}{
		{"dgx-h100", []string{"1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"}, 7},
		{"dgx-h100", []string{"3g.40gb", "3g.40gb", "3g.40gb", "1g.10gb"}, 2},
		{"dgx-h100", []string{"4g.40gb", "2g.20gb", "1g.10gb", "1g.10gb", "1g.20gb"}, 3},
		{"dgx-h100", []string{"1g.10gb+me", "1g.10gb+me", "2g.20gb", "2g.20gb", "2g.20gb", "1g.20gb"}, 4},
		{"dgx-h100", []string{"7g.80gb", "1g.10gb"}, 1},
		{"h200", []string{"1g.35gb", "1g.35gb", "1g.35gb", "1g.35gb", "1g.18gb"}, 4},
		// The allocator places 3g.20gb at slice 0 (the first placement), so
		// 2g.10gb lands at 4 and only one 1g.5gb fits (slice 7 has no 1g).
		{"dgx-a100", []string{"3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb", "1g.5gb"}, 3},
		// B200 variants: +me.all takes every decoder and the OFA, so +me
		// cannot join it; -me needs no media engine.
		{"hgx-b200", []string{"1g.23gb+me.all", "1g.23gb+me", "1g.23gb-me", "2g.45gb-me"}, 3},
	} {
		t.Run(tc.profile+"/"+strings.Join(tc.sequence, ","), func(t *testing.T) {
			node, server, slices := dynamicNode(t, tc.profile)
			mgr := mig.NewManager(server)
			allocated := sets.New[structured.DeviceID]()
			granted := 0
			for _, prof := range tc.sequence {
				r := allocateOne(t, slices, allocated, migClass, fmt.Sprintf(
					`device.attributes["gpu.gpudra.io"].minor == 0 && device.attributes["gpu.gpudra.io"].profile == %q`, prof))
				if r == nil {
					continue
				}
				granted++
				gpu, p, start, ok := migByName(node, r.Device)
				require.True(t, ok, r.Device)
				_, err := mgr.Create(gpu.UUID, p, start)
				require.NoError(t, err, "the allocator granted %s, which NVML cannot create next to %v", r.Device, allocated.UnsortedList())
			}
			require.Equal(t, tc.fits, granted)
			insts, err := mgr.Instances(node.GPUs[0].UUID, node.GPUs[0].MIG)
			require.NoError(t, err)
			require.Len(t, insts, granted)
		})
	}
}

// TestDynamicMIGExcludesWholeGPU: a MIG device in use makes its GPU
// unallocatable as a whole, and a GPU in use as a whole has no MIG device
// to give; other GPUs are unaffected.
func TestDynamicMIGExcludesWholeGPU(t *testing.T) {
	_, _, slices := dynamicNode(t, "dgx-h100")
	onGPU := func(minor int) string { return fmt.Sprintf(`device.attributes["gpu.gpudra.io"].minor == %d`, minor) }

	allocated := sets.New[structured.DeviceID]()
	r := allocateOne(t, slices, allocated, migClass, onGPU(0)+` && device.attributes["gpu.gpudra.io"].profile == "1g.10gb"`)
	require.NotNil(t, r)
	require.Nil(t, allocateOne(t, slices, allocated, gpuClass, onGPU(0)), "whole GPU 0 while one of its MIG devices is allocated")
	require.NotNil(t, allocateOne(t, slices, allocated, gpuClass, onGPU(1)), "GPU 1 is free")
	require.Nil(t, allocateOne(t, slices, allocated, migClass, onGPU(1)), "no MIG device of a GPU allocated whole")
	require.NotNil(t, allocateOne(t, slices, allocated, migClass, onGPU(0)), "GPU 0 has room for more MIG devices")

	// The whole-GPU class never hands out a MIG device, and vice versa.
	allocated = sets.New[structured.DeviceID]()
	for i := 0; i < 8; i++ {
		r := allocateOne(t, slices, allocated, gpuClass, "")
		require.NotNil(t, r)
		require.NotContains(t, r.Device, "-mig-")
	}
	require.Nil(t, allocateOne(t, slices, allocated, gpuClass, ""))
	require.Nil(t, allocateOne(t, slices, allocated, migClass, ""), "all GPUs are in use whole")
}

// TestMIGSlicesRespectLimits checks the API limits on a dynamic node.
func TestMIGSlicesRespectLimits(t *testing.T) {
	node, _, slices := dynamicNode(t, "dgx-h100")
	devices, sets := 0, 0
	for _, s := range slices {
		require.False(t, len(s.Spec.Devices) > 0 && len(s.Spec.SharedCounters) > 0, "a slice holds devices or counters, not both")
		require.LessOrEqual(t, len(s.Spec.Devices), resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures)
		require.LessOrEqual(t, len(s.Spec.SharedCounters), resourceapi.ResourceSliceMaxCounterSets)
		for _, cs := range s.Spec.SharedCounters {
			require.LessOrEqual(t, len(cs.Counters), resourceapi.ResourceSliceMaxCountersPerCounterSet)
		}
		for _, d := range s.Spec.Devices {
			require.LessOrEqual(t, len(d.ConsumesCounters), resourceapi.ResourceSliceMaxDeviceCounterConsumptionsPerDevice)
			require.LessOrEqual(t, len(d.Attributes)+len(d.Capacity), resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice)
			require.LessOrEqual(t, len(d.Name), 63)
		}
		devices += len(s.Spec.Devices)
		sets += len(s.Spec.SharedCounters)
	}
	// 8 GPUs, each whole plus 25 placements (7+7+4+3+2+1+1).
	require.Equal(t, 8*26, devices)
	require.Equal(t, len(node.GPUs), sets)
}

// --mig-profiles limits the published MIG devices to those profiles'
// placements; the whole GPUs and the counters stay as they are.
func TestRestrictedMIGProfiles(t *testing.T) {
	published := func(allow []string) (profiles map[string]int, wholes int, counters []resourceapi.CounterSet) {
		node := simNode(t, "dgx-h100", "n1")
		mig.Apply(node, mig.ModeDynamic)
		mig.RestrictProfiles(context.Background(), node, allow)
		res, err := slice.Resources("n1", node, slice.Options{})
		require.NoError(t, err)
		profiles = map[string]int{}
		for _, s := range slice.Objects(driverName, "n1", res) {
			counters = append(counters, s.Spec.SharedCounters...)
			for _, d := range s.Spec.Devices {
				if p := d.Attributes[slice.AttrProfile].StringValue; p != nil {
					profiles[*p]++
				} else {
					wholes++
				}
			}
		}
		return profiles, wholes, counters
	}
	allProfiles, allWholes, allCounters := published(nil)
	require.Len(t, allProfiles, 7)
	profiles, wholes, counters := published([]string{"3g.40gb", "1g.10gb", "1g.5gb"})
	require.Equal(t, map[string]int{"1g.10gb": 8 * 7, "3g.40gb": 8 * 2}, profiles, "8 GPUs × placements")
	require.Equal(t, allWholes, wholes)
	require.Equal(t, allCounters, counters)
}

// TestDynamicMIGWholeGPUCapacities: in dynamic MIG the whole GPU carries
// the multiprocessors and engines of its largest MIG profile beside its
// memory, as NVIDIA's driver publishes it, so one request can ask for
// "at least 100 multiprocessors" whether it gets a GPU or a MIG device.
func TestDynamicMIGWholeGPUCapacities(t *testing.T) {
	_, _, slices := dynamicNode(t, "dgx-h100")
	allocated := sets.New[structured.DeviceID]()
	r := allocateOne(t, slices, allocated, gpuClass, `device.capacity["gpu.gpudra.io"].multiprocessors.compareTo(quantity("132")) >= 0`+
		` && device.capacity["gpu.gpudra.io"].copyEngines.compareTo(quantity("8")) >= 0`)
	require.NotNil(t, r, "a whole H100 with its 7g profile's 132 multiprocessors and 8 copy engines")
	require.NotContains(t, r.Device, "-mig-")
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			if *d.Attributes[slice.AttrType].StringValue != slice.DeviceTypeGPU {
				continue
			}
			for _, c := range []resourceapi.QualifiedName{slice.CapacityMemory, slice.CapacityMultiprocessors, slice.CapacityCopyEngines,
				slice.CapacityDecoders, slice.CapacityEncoders, slice.CapacityJPEGEngines, slice.CapacityOFAEngines} {
				require.Contains(t, d.Capacity, c, d.Name)
			}
		}
	}
}
