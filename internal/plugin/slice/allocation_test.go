package slice_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gpudra/gpudra/internal/plugin/slice"
)

// The DeviceClass users get for whole GPUs.
const gpuClass = "gpu.gpudra.io"

type classLister map[string]*resourceapi.DeviceClass

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	var out []*resourceapi.DeviceClass
	for _, c := range l {
		out = append(out, c)
	}
	return out, nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if c, ok := l[name]; ok {
		return c, nil
	}
	return nil, fmt.Errorf("DeviceClass %q not found", name)
}

var classes = classLister{gpuClass: {
	ObjectMeta: metav1.ObjectMeta{Name: gpuClass},
	Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
		Expression: `device.driver == "gpu.gpudra.io" && device.attributes["gpu.gpudra.io"].type == "gpu"`,
	}}}},
}}

// cluster publishes the slices of simulated nodes exactly as the plugin
// would, keyed by node name.
func cluster(t *testing.T, nodes map[string]string) []*resourceapi.ResourceSlice {
	var out []*resourceapi.ResourceSlice
	for nodeName, profile := range nodes {
		res, err := slice.Resources(nodeName, simNode(t, profile, nodeName), slice.Options{})
		require.NoError(t, err)
		for _, s := range slice.Objects(driverName, nodeName, res) {
			out = append(out, &s)
		}
	}
	return out
}

type request struct {
	count      int64
	selector   string
	matchAttrs []string
}

func gpuClaim(name string, reqs ...request) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: "uid-" + types.UID(name)}}
	for i, r := range reqs {
		exact := &resourceapi.ExactDeviceRequest{DeviceClassName: gpuClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: r.count}
		if r.selector != "" {
			exact.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: r.selector}}}
		}
		reqName := fmt.Sprintf("gpu%d", i)
		c.Spec.Devices.Requests = append(c.Spec.Devices.Requests, resourceapi.DeviceRequest{Name: reqName, Exactly: exact})
		for _, a := range r.matchAttrs {
			attr := resourceapi.FullyQualifiedName(a)
			c.Spec.Devices.Constraints = append(c.Spec.Devices.Constraints, resourceapi.DeviceConstraint{
				Requests: []string{reqName}, MatchAttribute: &attr})
		}
	}
	return c
}

func allocate(t *testing.T, slices []*resourceapi.ResourceSlice, node string, allocated sets.Set[structured.DeviceID], claim *resourceapi.ResourceClaim) []resourceapi.DeviceRequestAllocationResult {
	t.Helper()
	return allocateWith(t, structured.Features{PrioritizedList: true, AdminAccess: true}, slices, node, allocated, claim)
}

// allocateWith is allocate with the allocator's feature gates.
func allocateWith(t *testing.T, features structured.Features, slices []*resourceapi.ResourceSlice, node string, allocated sets.Set[structured.DeviceID], claim *resourceapi.ResourceClaim) []resourceapi.DeviceRequestAllocationResult {
	t.Helper()
	ctx := context.Background()
	a, err := structured.NewAllocator(ctx, features,
		structured.AllocatedState{AllocatedDevices: allocated, AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
			AggregatedCapacity: structured.NewConsumedCapacityCollection()},
		classes, slices, cel.NewCache(10, cel.Features{}))
	require.NoError(t, err)
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	results, err := a.Allocate(ctx, n, []*resourceapi.ResourceClaim{claim})
	require.NoError(t, err)
	if len(results) == 0 {
		return nil
	}
	return results[0].Devices.Results
}

// attrOf reads back an attribute of an allocated device by its name in the
// slice: ours unqualified ("productName"), standard ones qualified
// ("resource.kubernetes.io/pcieRoot").
func attrOf(slices []*resourceapi.ResourceSlice, r resourceapi.DeviceRequestAllocationResult, name resourceapi.QualifiedName) string {
	for _, s := range slices {
		if s.Spec.Pool.Name != r.Pool {
			continue
		}
		for _, d := range s.Spec.Devices {
			if d.Name == r.Device {
				a := d.Attributes[name]
				switch {
				case a.StringValue != nil:
					return *a.StringValue
				case a.VersionValue != nil:
					return *a.VersionValue
				case a.IntValue != nil:
					return strconv.FormatInt(*a.IntValue, 10)
				}
			}
		}
	}
	return ""
}

// TestAllocationWithSchedulerAllocator runs the scheduler's own allocator
// over the slices the plugin publishes for a heterogeneous cluster and checks
// that CEL on productName, memory and compute capability selects correctly.
func TestAllocationWithSchedulerAllocator(t *testing.T) {
	slices := cluster(t, map[string]string{"gpu-h100": "dgx-h100", "gpu-mixed": "mixed", "gpu-l4": "l4"})
	const (
		h100 = `device.attributes["gpu.gpudra.io"].productName == "NVIDIA H100 80GB HBM3"`
		l4   = `device.attributes["gpu.gpudra.io"].productName == "NVIDIA L4"`
		mem  = `device.capacity["gpu.gpudra.io"].memory.compareTo(quantity("40Gi")) >= 0`
		cc9  = `device.attributes["gpu.gpudra.io"].cudaComputeCapability.compareTo(semver("9.0.0")) >= 0`
		cc89 = `device.attributes["gpu.gpudra.io"].cudaComputeCapability.compareTo(semver("8.9.0")) >= 0`
		pcie = "resource.kubernetes.io/pcieRoot"
	)
	tests := []struct {
		name        string
		node        string
		reqs        []request
		wantCount   int
		wantProduct string
		samePCIe    bool
	}{
		{name: "H100 by name on the H100 node", node: "gpu-h100", reqs: []request{{count: 1, selector: h100}}, wantCount: 1, wantProduct: "NVIDIA H100 80GB HBM3"},
		{name: "H100 by name not on the mixed node", node: "gpu-mixed", reqs: []request{{count: 1, selector: h100}}},
		{name: "L4 by name on the mixed node", node: "gpu-mixed", reqs: []request{{count: 1, selector: l4}}, wantCount: 1, wantProduct: "NVIDIA L4"},
		{name: ">=40Gi on the mixed node is an A100", node: "gpu-mixed", reqs: []request{{count: 1, selector: mem}}, wantCount: 1, wantProduct: "NVIDIA A100-SXM4-40GB"},
		{name: ">=40Gi never on the L4 node", node: "gpu-l4", reqs: []request{{count: 1, selector: mem}}},
		{name: "compute capability >= 9.0 only on Hopper", node: "gpu-mixed", reqs: []request{{count: 1, selector: cc9}}},
		{name: "compute capability >= 9.0 on the H100 node", node: "gpu-h100", reqs: []request{{count: 2, selector: cc9}}, wantCount: 2, wantProduct: "NVIDIA H100 80GB HBM3"},
		{name: "compute capability >= 8.9 on the L4 node", node: "gpu-l4", reqs: []request{{count: 2, selector: cc89}}, wantCount: 2, wantProduct: "NVIDIA L4"},
		{name: "all 8 GPUs of the H100 node", node: "gpu-h100", reqs: []request{{count: 8}}, wantCount: 8},
		{name: "9 GPUs do not fit the H100 node", node: "gpu-h100", reqs: []request{{count: 9}}},
		{name: "two A100s on one PCIe root", node: "gpu-mixed", reqs: []request{{count: 2, selector: mem, matchAttrs: []string{pcie}}}, wantCount: 2, samePCIe: true},
		{name: "two GPUs on one PCIe root don't exist on dgx-h100", node: "gpu-h100", reqs: []request{{count: 2, matchAttrs: []string{pcie}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			results := allocate(t, slices, tc.node, sets.New[structured.DeviceID](), gpuClaim("c", tc.reqs...))
			require.Len(t, results, tc.wantCount)
			roots := sets.New[string]()
			for _, r := range results {
				require.Equal(t, driverName, r.Driver)
				require.Equal(t, tc.node, r.Pool, "one pool per node, named after the node")
				if tc.wantProduct != "" {
					require.Equal(t, tc.wantProduct, attrOf(slices, r, "productName"))
				}
				roots.Insert(attrOf(slices, r, pcie))
			}
			if tc.samePCIe {
				require.Equal(t, 1, roots.Len())
			}
		})
	}
}

// TestAllocatorNeverReusesAllocatedGPUs fills a node claim by claim.
func TestAllocatorNeverReusesAllocatedGPUs(t *testing.T) {
	slices := cluster(t, map[string]string{"gpu-h200": "h200"})
	allocated := sets.New[structured.DeviceID]()
	for i := 0; i < 4; i++ {
		results := allocate(t, slices, "gpu-h200", allocated, gpuClaim(fmt.Sprintf("c%d", i), request{count: 1}))
		require.Len(t, results, 1)
		id := structured.MakeDeviceID(results[0].Driver, results[0].Pool, results[0].Device)
		require.False(t, allocated.Has(id))
		allocated.Insert(id)
	}
	require.Nil(t, allocate(t, slices, "gpu-h200", allocated, gpuClaim("c5", request{count: 1})), "a fifth claim must not fit 4 GPUs")
}
