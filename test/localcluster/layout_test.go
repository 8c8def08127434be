package localcluster

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/test/images"
)

// TestNodePathsAreTheChartValues: a node binds its directories onto the
// paths the chart's values name, so that one installation with the chart's
// defaults and values-simulated.yaml serves every node.
func TestNodePathsAreTheChartValues(t *testing.T) {
	chart := filepath.Join("..", "..", images.DefaultChartDir)
	read := func(file string) map[string]any {
		data, err := os.ReadFile(filepath.Join(chart, file))
		if err != nil {
			t.Fatal(err)
		}
		v := map[string]any{}
		if err := yaml.Unmarshal(data, &v); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		return v
	}
	defaults, simulated := read("values.yaml"), read(images.SimulatedValues)
	for _, tc := range []struct {
		values    map[string]any
		file, key string
		want      string
		perNode   bool
	}{
		{defaults, "values.yaml", "cdiRoot", CDIDir, true},
		{defaults, "values.yaml", "kubeletRoot", KubeletRoot, true},
		{simulated, images.SimulatedValues, "nvidiaDriverRoot", SimDriverRoot, false},
	} {
		if got := tc.values[tc.key]; got != tc.want {
			t.Errorf("%s sets %s=%v, the local cluster's nodes use %s", tc.file, tc.key, got, tc.want)
		}
		if tc.perNode && !slices.Contains(nodeBinds, tc.want) {
			t.Errorf("%s (%s) is not one of the node's own directories %v", tc.want, tc.key, nodeBinds)
		}
	}
}
