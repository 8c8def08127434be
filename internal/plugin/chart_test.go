package plugin

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpudra/gpudra/test/chart"
)

// TestChartConsumableShares renders the chart's plugin DaemonSets and
// parses each one's arguments with the plugin's own flags: the chart's
// consumable-shares values (gpudra's kubeletPlugin.consumableShares, per
// node group too, and NVIDIA's top-level consumableShares) reach the plugin
// as the mode they name.
func TestChartConsumableShares(t *testing.T) {
	group := "kubeletPlugin.nodeGroups[0].name=shares,kubeletPlugin.nodeGroups[0].nodeSelector.pool=shares,"
	tests := []struct {
		name string
		set  string
		// want is the mode of each DaemonSet by name suffix ("" the default one).
		want map[string]string
	}{
		{name: "default: disabled", set: "compatibility=", want: map[string]string{"": "disabled"}},
		{name: "native", set: "kubeletPlugin.consumableShares=memory", want: map[string]string{"": "memory"}},
		{name: "NVIDIA's value name", set: "compatibility=nvidia,consumableShares=unlimited", want: map[string]string{"": "unlimited"}},
		{name: "NVIDIA's value name, a count", set: "compatibility=nvidia,consumableShares=4", want: map[string]string{"": "4"}},
		{name: "both names agreeing", set: "consumableShares=4,kubeletPlugin.consumableShares=4", want: map[string]string{"": "4"}},
		{name: "a node group of its own", set: group + "kubeletPlugin.nodeGroups[0].consumableShares=8",
			want: map[string]string{"": "disabled", "-shares": "8"}},
		{name: "a node group inherits NVIDIA's value", set: group + "consumableShares=memory",
			want: map[string]string{"": "memory", "-shares": "memory"}},
		{name: "the deprecated flag in extraArgs", set: "kubeletPlugin.extraArgs={--gpu-sharing=consumable}", want: map[string]string{"": "memory"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := map[string]string{}
			for name, opts := range chartPluginOptions(t, chart.Render(t, "--set", tc.set)) {
				got[name] = opts.shares.String()
			}
			require.Equal(t, tc.want, got)
		})
	}
}

// chartPluginOptions parses the args of each plugin DaemonSet the chart
// renders into validated Options, keyed by the DaemonSet's name after
// gpudra-kubelet-plugin ("" for the default one, "-<group>" for a node group).
func chartPluginOptions(t *testing.T, objs []chart.Object) map[string]*Options {
	t.Helper()
	out := map[string]*Options{}
	for _, o := range chart.OfKind(objs, "DaemonSet") {
		ds := &appsv1.DaemonSet{}
		require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o, ds))
		name, ok := strings.CutPrefix(ds.Name, "gpudra-kubelet-plugin")
		if !ok {
			continue
		}
		opts := &Options{}
		fs := pflag.NewFlagSet("plugin", pflag.ContinueOnError)
		opts.AddFlags(fs)
		// --v is the logging flag the command adds (cmdmain), not an option.
		args := slices.DeleteFunc(slices.Clone(ds.Spec.Template.Spec.Containers[0].Args),
			func(a string) bool { return strings.HasPrefix(a, "--v=") })
		// The downward API sets these through the environment (EnvVars).
		require.NoError(t, fs.Parse(append(args, "--node-name=n", "--mps-daemon-namespace=gpudra-system")))
		require.NoError(t, opts.Validate())
		out[name] = opts
	}
	return out
}

// Two values for the one setting that disagree fail the install.
func TestChartConsumableSharesConflict(t *testing.T) {
	_, err := chart.RenderErr(t, "--set", "consumableShares=4,kubeletPlugin.consumableShares=memory")
	require.ErrorContains(t, err, `consumableShares="4" and kubeletPlugin.consumableShares="memory" disagree`)
}

// TestChartFabricPollInterval: the chart's kubeletPlugin.fabricPollInterval
// reaches the plugin's --fabric-poll-interval, 30s by default, "0s" off.
func TestChartFabricPollInterval(t *testing.T) {
	for set, want := range map[string]time.Duration{
		"compatibility=":                       DefaultFabricPollInterval,
		"kubeletPlugin.fabricPollInterval=2m":  2 * time.Minute,
		"kubeletPlugin.fabricPollInterval=0s":  0,
		"kubeletPlugin.fabricPollInterval=10s": 10 * time.Second,
	} {
		t.Run(set, func(t *testing.T) {
			opts := chartPluginOptions(t, chart.Render(t, "--set", set))
			require.Contains(t, opts, "")
			require.Equal(t, want, opts[""].FabricPollInterval)
		})
	}
}
