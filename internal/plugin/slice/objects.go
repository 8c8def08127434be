package slice

import (
	"fmt"
	"sort"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

// Objects renders DriverResources of a node as the ResourceSlice objects the
// resourceslice controller creates from them (names are illustrative: the
// API server generates the real ones). Used by `inspect` and by tests that
// feed the scheduler's allocator.
func Objects(driverName, nodeName string, res resourceslice.DriverResources) []resourceapi.ResourceSlice {
	poolNames := make([]string, 0, len(res.Pools))
	for name := range res.Pools {
		poolNames = append(poolNames, name)
	}
	sort.Strings(poolNames)
	var out []resourceapi.ResourceSlice
	for _, poolName := range poolNames {
		pool := res.Pools[poolName]
		for i, s := range pool.Slices {
			node := nodeName
			out = append(out, resourceapi.ResourceSlice{
				TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "ResourceSlice"},
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s-%d", nodeName, driverName, i)},
				Spec: resourceapi.ResourceSliceSpec{
					Driver:   driverName,
					NodeName: &node,
					Pool: resourceapi.ResourcePool{
						Name:               poolName,
						Generation:         pool.Generation,
						ResourceSliceCount: int64(len(pool.Slices)),
					},
					Devices:        s.Devices,
					SharedCounters: s.SharedCounters,
				},
			})
		}
	}
	return out
}
