package gpuverify

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/internal/shared/compat"
	"github.com/gpudra/gpudra/test/fidelity"
	"github.com/gpudra/gpudra/test/sim"
	"github.com/gpudra/gpudra/test/sim/models"
)

// fidelityStep runs step 6 alone on the simulated node of profile.
func fidelityStep(t *testing.T, profile string, failOnCorrections bool) *Report {
	p, err := sim.Parse([]byte(profile))
	require.NoError(t, err)
	s := sim.NewServer(p, "verify-node")
	require.Equal(t, nvml.SUCCESS, s.Init())
	defer func() { require.Equal(t, nvml.SUCCESS, s.Shutdown()) }()
	cfg := Config{NodeName: "verify-node", DriverName: testDriver, FailOnTableCorrections: failOnCorrections}
	k := &kit{cfg: cfg, names: compat.MustResolve(compat.Flags{Driver: testDriver}), lib: s, r: &Report{}}
	k.fidelity()
	k.r.count()
	return k.r
}

const fidelityHeader = "name: fidelity\ndriverVersion: \"570.124.06\"\ncudaDriverVersion: \"12.8\"\n"

// TestFidelityStepOnSimulatedModels: on every catalogue model the simulator
// answers what the table's real column names: no table correction.
func TestFidelityStepOnSimulatedModels(t *testing.T) {
	catalogue, err := fidelity.Catalogue()
	require.NoError(t, err)
	for _, m := range catalogue {
		t.Run(m.Name, func(t *testing.T) {
			rep := fidelityStep(t, fidelityHeader+"gpus: [{model: "+m.Name+", count: 2, numaNode: 0}]\n", true)
			require.Empty(t, failures(rep))
			require.Equal(t, 1, rep.Passed)
			require.NotNil(t, rep.Fidelity)
			require.Zero(t, rep.Fidelity.Corrections)
			require.Greater(t, rep.Fidelity.RowsChecked, 20)
			for _, o := range rep.Fidelity.Observations {
				require.Equal(t, m.Name, o.GPU.Model)
				require.False(t, o.SimulatorDiffers, o.Row.Text())
			}
		})
	}
}

// TestFidelityStepFindsCorrection: a GPU that answers otherwise than its
// row's real column (here an L4 whose memory query answers NOT_SUPPORTED,
// as a unified-memory GPU's does, while the x86 row says SUCCESS) is one
// table correction per GPU, printed with the row; it fails the run only
// with FailOnTableCorrections.
func TestFidelityStepFindsCorrection(t *testing.T) {
	// A model defined in the profile replaces the catalogue's of that name:
	// the catalogue's L4 with unified memory.
	data, err := models.Files.ReadFile("l4.yaml")
	require.NoError(t, err)
	var model []string
	for i, l := range strings.Split(strings.TrimSpace(string(data))+"\nnvml: {unifiedMemory: true}", "\n") {
		model = append(model, map[bool]string{true: "  - ", false: "    "}[i == 0]+l)
	}
	profile := fidelityHeader + "gpus: [{model: l4, numaNode: 0}]\nmodels:\n" + strings.Join(model, "\n") + "\n"
	tests := []struct {
		name              string
		failOnCorrections bool
		wantOK            bool
	}{
		{name: "reported", wantOK: true},
		{name: "failing", failOnCorrections: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rep := fidelityStep(t, profile, tc.failOnCorrections)
			require.Equal(t, tc.wantOK, rep.OK())
			require.Equal(t, 1, rep.Fidelity.Corrections)
			var out bytes.Buffer
			require.NoError(t, rep.WriteText(&out))
			text := out.String()
			t.Log("\n" + text)
			require.Contains(t, text, "TABLE CORRECTION: nvmlDeviceGetMemoryInfo on GPU 0 (l4): real NVML answered NOT_SUPPORTED; "+
				"the real column names SUCCESS (simulator: SUCCESS)\n")
			require.Contains(t, text, "row: docs/nvml-fidelity.md:")
			require.Contains(t, text, ": nvmlDeviceGetMemoryInfo | x86 | real: SUCCESS |")
			require.Equal(t, tc.failOnCorrections, strings.Contains(text, "  FAIL  TABLE CORRECTION"))

			out.Reset()
			require.NoError(t, rep.WriteJSON(&out))
			var back struct {
				Fidelity fidelity.Result `json:"fidelity"`
			}
			require.NoError(t, json.Unmarshal(out.Bytes(), &back))
			var corrections []fidelity.Observation
			for _, o := range back.Fidelity.Observations {
				if o.Correction {
					corrections = append(corrections, o)
				}
			}
			require.Len(t, corrections, 1)
			require.Equal(t, "nvmlDeviceGetMemoryInfo", corrections[0].Row.Call)
			require.Equal(t, "NOT_SUPPORTED", corrections[0].Observed)
			require.Equal(t, []string{"SUCCESS"}, corrections[0].Real)
		})
	}
}

func TestUncataloguedGroups(t *testing.T) {
	require.Equal(t, []string{fidelity.GroupX86}, uncataloguedGroups("amd64"))
	require.Empty(t, uncataloguedGroups("arm64"))
}
