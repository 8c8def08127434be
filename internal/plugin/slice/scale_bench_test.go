package slice_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gpudra/gpudra/internal/plugin/mig"
	"github.com/gpudra/gpudra/internal/plugin/slice"
)

// BenchmarkSchedulerAllocation runs the scheduler's allocator
// (k8s.io/dynamic-resource-allocation/structured) the way kube-scheduler's
// DRA plugin does, over the slices gpudra publishes for 120 simulated DGX
// H100 nodes, and places 800 one-GPU claims: per claim one allocator
// (PreFilter), then Allocate on each node in turn (Filter) until 100
// feasible nodes are found (the scheduler's minimum of feasible nodes to
// find), then the claim's allocation is committed on the first feasible node.
// It measures the allocator's CPU cost of our slice shape, without the API
// round trips (test/e2e BenchmarkSchedulerScale measures the real scheduler).
//
//	go test -run '^$' -bench SchedulerAllocation -benchtime 1x ./internal/plugin/slice
//
// SCALE_NODES and SCALE_CLAIMS override the number of nodes (120) and
// claims (800 on whole GPUs; 20 on the dynamic-MIG shapes, whose filters
// take tens of milliseconds each).
func BenchmarkSchedulerAllocation(b *testing.B) {
	const feasibleToFind = 100
	nodes, override := 120, 0
	if v, err := strconv.Atoi(os.Getenv("SCALE_NODES")); err == nil && v > 0 {
		nodes = v
	}
	if v, err := strconv.Atoi(os.Getenv("SCALE_CLAIMS")); err == nil && v > 0 {
		override = v
	}
	for _, shape := range []struct {
		name     string
		profile  string
		mode     mig.Mode
		profiles []string // --mig-profiles
		claims   int
	}{
		{"whole-gpus", "dgx-h100", mig.ModeStatic, nil, 800},
		// Every GPU also offers every MIG placement, all on shared counters.
		{"dynamic-mig", "dgx-h100", mig.ModeDynamic, nil, 20},
		{"dynamic-mig-2-profiles", "dgx-h100", mig.ModeDynamic, []string{"1g.10gb", "3g.40gb"}, 20},
	} {
		claims := shape.claims
		if override > 0 {
			claims = override
		}
		b.Run(shape.name, func(b *testing.B) {
			var all []*resourceapi.ResourceSlice
			var nodeObjs []*v1.Node
			for i := 0; i < nodes; i++ {
				name := fmt.Sprintf("node-%03d", i)
				node := simNode(b, shape.profile, name)
				mig.Apply(node, shape.mode)
				mig.RestrictProfiles(context.Background(), node, shape.profiles)
				res, err := slice.Resources(name, node, slice.Options{})
				if err != nil {
					b.Fatal(err)
				}
				for _, s := range slice.Objects(driverName, name, res) {
					all = append(all, &s)
				}
				nodeObjs = append(nodeObjs, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
			}
			ctx := context.Background()
			celCache := cel.NewCache(10, cel.Features{})
			b.ResetTimer()
			var filterCalls int
			var filterTime time.Duration
			for it := 0; it < b.N; it++ {
				allocated := sets.New[structured.DeviceID]()
				next := 0
				for c := 0; c < claims; c++ {
					claim := gpuClaim(fmt.Sprintf("c%d", c), request{count: 1})
					a, err := structured.NewAllocator(ctx, structured.Features{PrioritizedList: true, AdminAccess: true, PartitionableDevices: true},
						structured.AllocatedState{AllocatedDevices: allocated, AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
							AggregatedCapacity: structured.NewConsumedCapacityCollection()},
						classes, all, celCache)
					if err != nil {
						b.Fatal(err)
					}
					var chosen []resourceapi.AllocationResult
					feasible := 0
					for k := 0; k < nodes && feasible < feasibleToFind; k++ {
						n := nodeObjs[(next+k)%nodes]
						start := time.Now()
						res, err := a.Allocate(ctx, n, []*resourceapi.ResourceClaim{claim})
						filterTime += time.Since(start)
						filterCalls++
						if err != nil {
							b.Fatal(err)
						}
						if len(res) > 0 {
							feasible++
							if chosen == nil {
								chosen = res
							}
						}
					}
					next = (next + 1) % nodes
					if chosen == nil {
						b.Fatalf("claim %d of %d found no node", c, claims)
					}
					for _, r := range chosen[0].Devices.Results {
						id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
						if allocated.Has(id) {
							b.Fatalf("device %s allocated twice", id)
						}
						allocated.Insert(id)
					}
				}
			}
			b.StopTimer()
			perClaim := b.Elapsed() / time.Duration(b.N*claims)
			b.ReportMetric(float64(time.Second)/float64(perClaim), "claims/s")
			b.ReportMetric(float64(filterTime.Microseconds())/float64(filterCalls), "us/filter")
		})
	}
}
