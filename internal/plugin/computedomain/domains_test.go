package computedomain

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/shared/compat"
)

var (
	nativeGVR = v1alpha1.SchemeGroupVersion.WithResource(v1alpha1.ComputeDomainResource)
	nvidiaGVR = compat.NVIDIAComputeDomains.WithResource(v1alpha1.ComputeDomainResource)
)

func domainObject(gv schema.GroupVersion, ns, name, uid string, nodes ...map[string]any) *unstructured.Unstructured {
	list := make([]any, len(nodes))
	for i, n := range nodes {
		list[i] = n
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gv.String(), "kind": v1alpha1.ComputeDomainKind,
		"metadata": map[string]any{"name": name, "namespace": ns, "uid": uid},
		"spec":     map[string]any{"numNodes": int64(2), "channel": map[string]any{"resourceClaimTemplate": map[string]any{"name": "t"}}},
		"status":   map[string]any{"status": "NotReady", "nodes": list},
	}}
}

func statusNode(name, ip, clique string, index int64, status string) map[string]any {
	return map[string]any{"name": name, "ipAddress": ip, "cliqueID": clique, "index": index, "status": status}
}

func TestDomains(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lists := map[schema.GroupVersionResource]string{nativeGVR: "ComputeDomainList", nvidiaGVR: "ComputeDomainList"}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), lists,
		domainObject(v1alpha1.SchemeGroupVersion, "team", "ours", "u1", statusNode("node-a", "10.0.0.1", "clique.1", 0, "Ready")),
		domainObject(compat.NVIDIAComputeDomains, "team", "theirs", "u2"))
	factory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	d, err := NewDomains(factory, []schema.GroupVersionResource{nativeGVR, nvidiaGVR})
	require.NoError(t, err)
	n, _ := testNode(t, d, nil, nil)
	require.NoError(t, d.SyncNodesOnChange(ctx, n))
	factory.Start(ctx.Done())
	require.True(t, cache.WaitForCacheSync(ctx.Done(), d.HasSynced))

	for _, tc := range []struct{ uid, name, state string }{{"u1", "ours", "Ready"}, {"u2", "theirs", ""}} {
		cd, err := d.GetDomain(ctx, tc.uid)
		require.NoError(t, err, tc.uid)
		assert.Equal(t, tc.name, cd.Name)
		var state string
		if len(cd.Status.Nodes) > 0 {
			state = string(cd.Status.Nodes[0].Status)
		}
		assert.Equal(t, tc.state, state, tc.uid)
	}
	_, err = d.GetDomain(ctx, "u3")
	require.True(t, apierrors.IsNotFound(err), "%v", err)

	// A daemon claim of u1 here: a status change rewrites its node list.
	_, err = n.Prepare(ctx, daemonClaim(t, "gpudra", "d1", "u1"))
	require.NoError(t, err)
	file := filepath.Join(n.cfg.DomainsDir, "u1", NodesConfigFile)
	obj := domainObject(v1alpha1.SchemeGroupVersion, "team", "ours", "u1", statusNode("node-a", "10.0.0.1", "clique.1", 0, "Ready"),
		statusNode("node-b", "10.0.0.2", "clique.1", 1, "NotReady"))
	_, err = dyn.Resource(nativeGVR).Namespace("team").Update(ctx, obj, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(file)
		return err == nil && string(data) == "10.0.0.1\n10.0.0.2\n"
	}, 10*time.Second, 10*time.Millisecond)
}
