package localcluster

import (
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAPIServerOnlyConfig: an API-server-only cluster has no nodes, runs
// etcd and the given kube-apiserver with its own feature gates, on ports
// and in a directory away from the default cluster's, so both can run.
func TestAPIServerOnlyConfig(t *testing.T) {
	def := DefaultConfig("/repo")
	cfg := APIServerOnlyConfig("/repo", "/repo/_output/localcluster-kube-apiserver-v1.34.4", "/bin/kube-apiserver-v1.34.4", "A=true")
	cfg.HostIP = "192.0.2.10"
	require.NoError(t, cfg.complete())
	require.Empty(t, cfg.Nodes)
	for _, p := range [][2]int{{cfg.EtcdPort, def.EtcdPort}, {cfg.EtcdPeerPort, def.EtcdPeerPort}, {cfg.APIServerPort, def.APIServerPort}} {
		require.NotEqual(t, p[1], p[0])
	}
	require.NotEqual(t, def.Dir, cfg.Dir)
	c := New(cfg, io.Discard)
	require.Equal(t, []string{etcdName, apiserverName}, c.allComponents())
	require.Equal(t, "/bin/kube-apiserver-v1.34.4", c.apiserverBinary())
	require.Equal(t, "A=true", c.apiserverFeatureGates())

	full := New(def, io.Discard)
	require.Equal(t, def.BinDir+"/kube-apiserver", full.apiserverBinary())
	require.Equal(t, alphaFeatureGates, full.apiserverFeatureGates())
	require.Contains(t, full.allComponents(), schedulerName)
}
