package plugin

import (
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/internal/shared/envflag"
)

// Only the downward API's values (and KUBECONFIG) come from the
// environment; the variables that used to set other flags are ignored, and
// the command line wins over the environment.
func TestEnvVars(t *testing.T) {
	tests := []struct {
		name  string
		env   map[string]string
		args  []string
		check func(t *testing.T, o *Options)
	}{
		{name: "downward API", env: map[string]string{"NODE_NAME": "node-a", "POD_UID": "1234", "KUBECONFIG": "/kc"},
			check: func(t *testing.T, o *Options) {
				assert.Equal(t, "node-a", o.NodeName)
				assert.Equal(t, "1234", o.PodUID)
				assert.Equal(t, "/kc", o.Kubeconfig)
			}},
		{name: "the command line wins", env: map[string]string{"NODE_NAME": "node-a"}, args: []string{"--node-name=node-b"},
			check: func(t *testing.T, o *Options) { assert.Equal(t, "node-b", o.NodeName) }},
		{name: "other settings are flags only",
			env: map[string]string{"GPU_SHARING": "consumable", "GPUDRA_MIG": "dynamic", "KUBE_API_BURST": "1",
				"GPUDRA_TELEMETRY_INTERVAL": "1m", "GPUDRA_HEALTH_MONITORING": "false", "DRIVER_NAME": "gpu.example.com",
				"GPUDRA_COMPATIBILITY": "nvidia", "NVIDIA_DRIVER_ROOT": "/x", "MPS_CHECK_INTERVAL": "1h",
				// NVIDIA's plugin reads its flag from this; the chart passes --consumable-shares.
				"CONSUMABLE_SHARES": "unlimited"},
			check: func(t *testing.T, o *Options) {
				assert.Equal(t, SharingExclusive, o.GPUSharing)
				assert.Empty(t, o.ConsumableShares)
				assert.Equal(t, "static", o.MIG)
				assert.Equal(t, 400, o.KubeAPIBurst)
				assert.True(t, o.Health.Enabled)
				assert.Equal(t, "gpu.gpudra.io", o.DriverName)
				assert.Empty(t, o.Compatibility)
				assert.Equal(t, "/", o.NvidiaDriverRoot)
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := &Options{}
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			o.AddFlags(fs)
			require.NoError(t, fs.Parse(tc.args))
			lookup := func(name string) (string, bool) { v, ok := tc.env[name]; return v, ok }
			require.NoError(t, envflag.Apply(fs, lookup, EnvVars...))
			tc.check(t, o)
		})
	}
	// The inspect command's bindings name flags it has.
	fs := pflag.NewFlagSet("inspect", pflag.ContinueOnError)
	(&Options{}).AddInspectFlags(fs)
	require.NoError(t, envflag.Apply(fs, func(string) (string, bool) { return "x", true }, InspectEnvVars...))
}
