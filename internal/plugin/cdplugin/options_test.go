package cdplugin

import (
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/plugin/computedomain"
	"github.com/gpudra/gpudra/internal/plugin/nvmllib"
	"github.com/gpudra/gpudra/internal/shared/compat"
)

func TestOptions(t *testing.T) {
	parse := func(args ...string) *Options {
		o := &Options{}
		fs := pflag.NewFlagSet("compute-domain", pflag.ContinueOnError)
		o.AddFlags(fs)
		require.NoError(t, fs.Parse(args))
		return o
	}
	o := parse("--node-name=node-a", "--namespace=gpudra")
	require.NoError(t, o.Validate())
	require.Equal(t, computedomain.DefaultChannels, o.Channels)
	require.Equal(t, "/var/lib/kubelet/plugins/compute-domain.gpudra.io", o.PluginDataDir())
	require.Equal(t, "resource.gpudra.io/computeDomain", o.Names().Label)
	require.Equal(t, DefaultFabricRetryInterval, o.FabricRetryInterval)

	o = parse("--node-name=node-a", "--namespace=gpudra", "--compatibility=nvidia")
	require.NoError(t, o.Validate())
	require.Equal(t, "compute-domain.nvidia.com", o.Names().Driver, "the names follow compat")
	require.Equal(t, "/var/lib/kubelet/plugins/compute-domain.nvidia.com", o.PluginDataDir())

	for args, want := range map[string][]string{
		"--node-name":                {"--namespace=gpudra"},
		"--namespace":                {"--node-name=a"},
		"--channels=0":               {"--node-name=a", "--namespace=b", "--channels=0"},
		"--max-devices-per-slice":    {"--node-name=a", "--namespace=b", "--max-devices-per-slice=129"},
		"--daemon-ready-wait=-1s":    {"--node-name=a", "--namespace=b", "--daemon-ready-wait=-1s"},
		"--daemon-ready-wait=45s":    {"--node-name=a", "--namespace=b", "--daemon-ready-wait=45s"},
		"unknown compatibility":      {"--node-name=a", "--namespace=b", "--compatibility=amd"},
		"--fabric-retry-interval=0s": {"--node-name=a", "--namespace=b", "--fabric-retry-interval=0s"},
	} {
		err := parse(want...).Validate()
		require.Error(t, err, args)
		if args != "unknown compatibility" {
			require.ErrorContains(t, err, args)
		}
	}
}

// Without NVML the node publishes without a clique (logged), and a node
// without a clique needs no fabric management capability.
func TestWithoutNVML(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	roots := nvmllib.DriverRoots(t.TempDir(), "")
	clique, gpus, err := nodeClique(ctx, roots)
	require.NoError(t, err)
	require.Empty(t, clique)
	require.Empty(t, gpus)
	require.Nil(t, fabricMgmt(ctx, roots, ""))
	require.Nil(t, fabricMgmt(ctx, roots, "cluster.1"), "a driver without the capability: logged, daemon claims refused")
}

// The informers follow the groups the API server serves, NVIDIA's too in
// the compatibility mode.
func TestServed(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	nvidiaGVR := compat.NVIDIAComputeDomains.WithResource(v1alpha1.ComputeDomainResource)
	list := func(gvrs ...schema.GroupVersionResource) []*metav1.APIResourceList {
		var out []*metav1.APIResourceList
		for _, gvr := range gvrs {
			out = append(out, &metav1.APIResourceList{GroupVersion: gvr.GroupVersion().String(),
				APIResources: []metav1.APIResource{{Name: gvr.Resource, Namespaced: true, Kind: v1alpha1.ComputeDomainKind}}})
		}
		return out
	}
	nvidia := compat.Names{Mode: compat.NVIDIA}
	for _, tc := range []struct {
		name   string
		names  compat.Names
		served []*metav1.APIResourceList
		want   []schema.GroupVersionResource
	}{
		{"native", compat.Default(), list(nativeGVR, nvidiaGVR), []schema.GroupVersionResource{nativeGVR}},
		{"nvidia, both", nvidia, list(nativeGVR, nvidiaGVR), []schema.GroupVersionResource{nvidiaGVR, nativeGVR}},
		{"nvidia, NVIDIA's only", nvidia, list(nvidiaGVR), []schema.GroupVersionResource{nvidiaGVR}},
		{"no CRD", compat.Default(), nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			client.Resources = tc.served
			got, err := served(ctx, client.Discovery(), tc.names)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}
