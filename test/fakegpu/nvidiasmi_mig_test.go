package fakegpu

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/test/nvmlsim"
	"github.com/gpudra/gpudra/test/sim"
)

// migLayout is the persisted MIG state as "<gpu>:<profile>@<start>" per GPU
// instance, and the GPUs in MIG mode.
func migLayout(t *testing.T, stateFile string) (enabled []int, instances []string) {
	t.Helper()
	st, err := sim.ReadState(stateFile)
	require.NoError(t, err)
	for i, g := range st.GPUs {
		if g.MIGEnabled {
			enabled = append(enabled, i)
		}
		for _, gi := range g.GPUInstances {
			require.Len(t, gi.ComputeInstances, 1, "GPU %d instance %d", i, gi.ID)
			require.NotEmpty(t, gi.ComputeInstances[0].UUID)
			instances = append(instances, fmt.Sprintf("%d/%s@%d", i, gi.Profile, gi.Start))
		}
	}
	return enabled, instances
}

// TestNvidiaSMIMIG runs the MIG commands in sequence over one simulated
// dgx-h100 node, as an administrator prepares and restores a static-MIG
// node, and checks the simulator's state file after each.
func TestNvidiaSMIMIG(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, nvmlsim.WriteConfig(root, nvmlsim.Config{Profile: "dgx-h100", Node: "node-a", StateFile: "var/lib/gpudra-sim/nvml-state.json"}))
	t.Setenv(nvmlsim.RootEnv, root)
	stateFile := filepath.Join(root, "var/lib/gpudra-sim/nvml-state.json")
	steps := []struct {
		name         string
		args         []string
		wantCode     int
		wantOut      string
		wantEnabled  []int
		wantInstance []string
	}{
		{"create before MIG mode", []string{"mig", "-i", "0", "-cgi", "1g.10gb", "-C"}, 1, "MIG mode is disabled", nil, nil},
		{"enable", []string{"-i", "0,1", "-mig", "1"}, 0, "Enabled MIG Mode for GPU GPU-", []int{0, 1}, nil},
		{"create first fit", []string{"mig", "-i", "0", "-cgi", "3g.40gb,1g.10gb,1g.10gb", "-C"}, 0,
			"Successfully created GPU instance ID", []int{0, 1}, []string{"0/1g.10gb@4", "0/1g.10gb@5", "0/3g.40gb@0"}},
		{"create on two GPUs", []string{"mig", "-i", "1", "-cgi", "7g.80gb", "-C"}, 0, "using profile MIG 7g.80gb", []int{0, 1},
			[]string{"0/1g.10gb@4", "0/1g.10gb@5", "0/3g.40gb@0", "1/7g.80gb@0"}},
		{"GPU full", []string{"mig", "-i", "1", "-cgi", "1g.10gb", "-C"}, 1, "no free placement left", []int{0, 1},
			[]string{"0/1g.10gb@4", "0/1g.10gb@5", "0/3g.40gb@0", "1/7g.80gb@0"}},
		{"unknown profile", []string{"mig", "-i", "0", "-cgi", "5g.99gb", "-C"}, 1, "unknown GPU instance profile", []int{0, 1},
			[]string{"0/1g.10gb@4", "0/1g.10gb@5", "0/3g.40gb@0", "1/7g.80gb@0"}},
		{"disable while instances exist", []string{"-i", "1", "-mig", "0"}, 1, "destroy its instances first", []int{0, 1},
			[]string{"0/1g.10gb@4", "0/1g.10gb@5", "0/3g.40gb@0", "1/7g.80gb@0"}},
		{"gi without ci flag", []string{"mig", "-i", "0", "-cgi", "1g.10gb"}, 2, "simulated mig commands", []int{0, 1},
			[]string{"0/1g.10gb@4", "0/1g.10gb@5", "0/3g.40gb@0", "1/7g.80gb@0"}},
		{"no GPU named", []string{"mig", "-dci", "-dgi"}, 2, "name the GPUs", []int{0, 1},
			[]string{"0/1g.10gb@4", "0/1g.10gb@5", "0/3g.40gb@0", "1/7g.80gb@0"}},
		{"destroy", []string{"mig", "-i", "0,1", "-dci", "-dgi"}, 0, "Successfully destroyed GPU instance ID", []int{0, 1}, nil},
		{"disable", []string{"-i", "0,1", "-mig", "0"}, 0, "Disabled MIG Mode", nil, nil},
		{"no such GPU", []string{"-i", "8", "-mig", "1"}, 1, "no such GPU", nil, nil},
	}
	for _, s := range steps {
		var out bytes.Buffer
		require.Equal(t, s.wantCode, NvidiaSMI(s.args, &out, &out), "%s: %s", s.name, out.String())
		require.Contains(t, out.String(), s.wantOut, s.name)
		enabled, instances := migLayout(t, stateFile)
		require.Equal(t, s.wantEnabled, enabled, s.name)
		require.ElementsMatch(t, s.wantInstance, instances, s.name)
	}
}

// TestNvidiaSMIMIGNoRoot: outside a fake driver root the MIG commands say
// where they looked.
func TestNvidiaSMIMIGNoRoot(t *testing.T) {
	t.Setenv(nvmlsim.RootEnv, t.TempDir())
	var out bytes.Buffer
	require.Equal(t, 9, NvidiaSMI([]string{"-i", "0", "-mig", "1"}, &out, &out))
	require.Contains(t, out.String(), nvmlsim.ConfigPath)
}
