package plugin

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpudra/gpudra/internal/plugin/slice"
	"github.com/gpudra/gpudra/test/fakedriver"
)

// sliceAPI is a fake API server that, like the real one, fills in names from
// generateName and counts slice writes.
func sliceAPI(t *testing.T) (*fake.Clientset, *atomic.Int32) {
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", UID: "node-uid"}})
	var writes atomic.Int32
	client.PrependReactor("create", "resourceslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		writes.Add(1)
		s := a.(k8stesting.CreateAction).GetObject().(*resourceapi.ResourceSlice)
		if s.Name == "" {
			s.Name = s.GenerateName + rand.String(5)
		}
		return false, nil, nil
	})
	for _, verb := range []string{"update", "delete"} {
		client.PrependReactor(verb, "resourceslices", func(k8stesting.Action) (bool, runtime.Object, error) {
			writes.Add(1)
			return false, nil, nil
		})
	}
	return client, &writes
}

func testResources(t *testing.T, maxPerSlice int) resourceslice.DriverResources {
	node, err := OpenNode(context.Background(), &Options{NvidiaDriverRoot: fakedriver.ForTest(t, "dgx-h100", "node-a")})
	require.NoError(t, err)
	t.Cleanup(node.Close)
	res, err := slice.Resources("node-a", node.Node, slice.Options{MaxDevicesPerSlice: maxPerSlice})
	require.NoError(t, err)
	return res
}

// sliceLayouts: a dgx-h100 node's 8 GPUs in one slice and in three.
var sliceLayouts = []struct {
	name        string
	maxPerSlice int
	wantSlices  int
}{
	{name: "one slice", maxPerSlice: 128, wantSlices: 1},
	{name: "three slices", maxPerSlice: 3, wantSlices: 3},
}

// What publishFirst creates is exactly what the helper's ResourceSlice
// controller wants: started afterwards, it adopts the slices without a write.
func TestPublishFirstIsAdoptedByTheController(t *testing.T) {
	for _, tc := range sliceLayouts {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			client, writes := sliceAPI(t)
			res := testResources(t, tc.maxPerSlice)
			generation, err := publishFirst(ctx, client, "gpu.gpudra.io", "node-a", res)
			require.NoError(t, err)
			require.Equal(t, int64(1), generation)
			require.Equal(t, int32(tc.wantSlices), writes.Load())

			ctrl, err := resourceslice.StartController(ctx, resourceslice.Options{DriverName: "gpu.gpudra.io", KubeClient: client,
				Owner: &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: "node-a"}, Resources: &res})
			require.NoError(t, err)
			defer ctrl.Stop()
			// The controller syncs the pool once right after start; give it
			// time to do so, then check it neither created, updated nor deleted.
			time.Sleep(500 * time.Millisecond)
			require.Equal(t, resourceslice.Stats{}, ctrl.GetStats())
			require.Equal(t, int32(tc.wantSlices), writes.Load())
			l, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
			require.NoError(t, err)
			require.Len(t, l.Items, tc.wantSlices)
			for _, s := range l.Items {
				require.Equal(t, int64(1), s.Spec.Pool.Generation)
				require.Equal(t, "node-uid", string(s.OwnerReferences[0].UID))
			}
		})
	}
}

// A node that already has slices (a restarted plugin) is left to the
// controller, with the pool generation above the one found.
func TestPublishFirstSkipsWhenSlicesExist(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client, writes := sliceAPI(t)
	res := testResources(t, 128)
	for _, want := range []int64{1, 2} {
		generation, err := publishFirst(ctx, client, "gpu.gpudra.io", "node-a", res)
		require.NoError(t, err)
		require.Equal(t, want, generation)
	}
	require.Equal(t, int32(1), writes.Load())
}

// An instance that takes over a node's slices (a restart, a rolling
// update) publishes them as a new pool generation even when nothing in
// them changed: the generation tells clients (the local cluster's
// helm-upgrade, an operator) that the new instance's slices are in place,
// which identical content cannot. Before, the controller adopted the old
// slices (generation 1) and a changed configuration reached them only
// after its first sync, a second or more after the new pod was Ready.
func TestTakeoverPublishesANewGeneration(t *testing.T) {
	for _, tc := range sliceLayouts {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			client, _ := sliceAPI(t)
			res := testResources(t, tc.maxPerSlice)
			_, err := publishFirst(ctx, client, "gpu.gpudra.io", "node-a", res) // the earlier instance's slices
			require.NoError(t, err)
			generation, err := publishFirst(ctx, client, "gpu.gpudra.io", "node-a", res)
			require.NoError(t, err)
			pub := &publisher{base: res}
			pub.generation = generation
			desired := pub.Desired()
			ctrl, err := resourceslice.StartController(ctx, resourceslice.Options{DriverName: "gpu.gpudra.io", KubeClient: client,
				Owner: &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: "node-a"}, Resources: &desired})
			require.NoError(t, err)
			defer ctrl.Stop()
			require.Eventually(t, func() bool {
				l, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
				if err != nil || len(l.Items) != tc.wantSlices {
					return false
				}
				for _, s := range l.Items {
					if s.Spec.Pool.Generation != 2 {
						return false
					}
				}
				return true
			}, 10*time.Second, 50*time.Millisecond, "every slice rewritten as pool generation 2")
		})
	}
}

// Without the Node object the plugin cannot name the owner; it reports that
// and leaves publishing to the controller.
func TestPublishFirstWithoutNode(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset()
	generation, err := publishFirst(ctx, client, "gpu.gpudra.io", "node-a", testResources(t, 128))
	require.ErrorContains(t, err, "get node node-a")
	require.Zero(t, generation)
}
