package fidelity

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/test/sim"
	"github.com/gpudra/gpudra/test/sim/models"
)

func TestParseModels(t *testing.T) {
	catalogue, err := Catalogue()
	require.NoError(t, err)
	tests := []struct {
		col     string
		want    Selector
		wantErr string
	}{
		{col: "all", want: Selector{All: true}},
		{col: "x86", want: Selector{Groups: []string{GroupX86}}},
		{col: "l4, `l40s`, grace", want: Selector{Groups: []string{GroupGrace}, Models: []string{"l4", "l40s"}}},
		{col: "all MIG models", wantErr: `"all MIG models" is not ` + "`all`, a group (x86, grace, unified-memory) or a catalogue model (a100-sxm4-40gb"},
		{col: "h1000", wantErr: `"h1000" is not`},
	}
	for _, tc := range tests {
		t.Run(tc.col, func(t *testing.T) {
			got, err := ParseModels(tc.col, catalogue)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestApplies(t *testing.T) {
	tests := []struct {
		name   string
		sel    Selector
		model  string
		groups []string
		want   bool
	}{
		{"all: a catalogue model", Selector{All: true}, "l4", []string{GroupX86}, true},
		{"all: a GPU outside the catalogue", Selector{All: true}, "", nil, true},
		{"named model", Selector{Models: []string{"l4", "l40s"}}, "l40s", []string{GroupX86}, true},
		{"other model", Selector{Models: []string{"l4"}}, "l40s", []string{GroupX86}, false},
		{"group", Selector{Groups: []string{GroupGrace}}, "gh200-96gb", []string{GroupGrace}, true},
		{"other group", Selector{Groups: []string{GroupGrace}}, "h100-sxm5-80gb", []string{GroupX86}, false},
		{"group of a GPU outside the catalogue", Selector{Groups: []string{GroupX86}}, "", []string{GroupX86}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.sel.Applies(tc.model, tc.groups))
		})
	}
}

func TestMatchProduct(t *testing.T) {
	catalogue, err := Catalogue()
	require.NoError(t, err)
	tests := []struct{ product, want string }{
		{"NVIDIA H200", "h200-sxm-141gb"}, // the product name of the real run (docs/development.md)
		{"nvidia h100 80gb hbm3 ", "h100-sxm5-80gb"},
		{"NVIDIA GH200 96GB HBM3", "gh200-96gb"},
		{"NVIDIA GB200", "gb200"},
		{"NVIDIA H100 PCIe", ""},
	}
	for _, tc := range tests {
		t.Run(tc.product, func(t *testing.T) {
			m, ok := MatchProduct(catalogue, tc.product)
			require.Equal(t, tc.want != "", ok)
			require.Equal(t, tc.want, m.Name)
		})
	}
}

// catalogueServer is a simulated node with one GPU of each catalogue model
// (MIG disabled, idle: the state the table's simulator column is for), and
// extra GPU entries of the profile.
func catalogueServer(t *testing.T, extra string) *sim.Server {
	t.Helper()
	catalogue, err := Catalogue()
	require.NoError(t, err)
	profile := "name: fidelity\ndriverVersion: \"570.124.06\"\ncudaDriverVersion: \"12.8\"\ngpus:\n"
	for _, m := range catalogue {
		profile += fmt.Sprintf("  - {model: %s, numaNode: 0}\n", m.Name)
	}
	p, err := sim.Parse([]byte(profile + extra))
	require.NoError(t, err)
	s := sim.NewServer(p, "fidelity")
	require.Equal(t, nvml.SUCCESS, s.Init())
	t.Cleanup(func() { _ = s.Shutdown() })
	return s
}

// TestCheckSimulator: on the simulated library every row's real column
// holds what the simulator answers, so a check finds no table correction;
// every callable row about catalogue models is checked on each GPU it is
// about.
func TestCheckSimulator(t *testing.T) {
	s := catalogueServer(t, "")
	rows, err := Table()
	require.NoError(t, err)
	res, err := Check(s, rows, Options{})
	require.NoError(t, err)
	catalogue, err := Catalogue()
	require.NoError(t, err)
	require.Len(t, res.GPUs, len(catalogue))
	for i, g := range res.GPUs {
		require.Equal(t, catalogue[i].Name, g.Model, "GPU %d (%s) mapped by its product name", i, g.ProductName)
	}
	for _, o := range res.Observations {
		require.False(t, o.Correction, "%s on %s: %s", o.Row.Text(), o.GPU.Model, o.Observed)
		require.False(t, o.SimulatorDiffers, "%s on %s: %s", o.Row.Text(), o.GPU.Model, o.Observed)
	}
	require.Zero(t, res.Corrections)
	require.Positive(t, res.RowsNotCallable)
	require.Equal(t, 2, res.RowsNotHere, "the two unified-memory rows (GetMemoryInfo, _v2): no catalogue model is unified-memory")
	require.Equal(t, len(rows), res.RowsChecked+res.RowsNotHere+res.RowsNotCallable)
}

// TestCheckFindsCorrection: a row whose real column the library
// contradicts is exactly one table correction, reported with the row.
func TestCheckFindsCorrection(t *testing.T) {
	s := catalogueServer(t, "")
	rows, err := Table()
	require.NoError(t, err)
	i := slices.IndexFunc(rows, func(r Row) bool { return r.Call == "nvmlDeviceGetMigMode" && r.Models == "l4, l40s" })
	require.GreaterOrEqual(t, i, 0, "the table has the row this test doctors")
	rows[i].Models = "l4"
	rows[i].Real = "SUCCESS (doctored)"
	rows[i].Simulator = "SUCCESS"
	res, err := Check(s, rows, Options{})
	require.NoError(t, err)
	require.Equal(t, 1, res.Corrections)
	var found []Observation
	for _, o := range res.Observations {
		if o.Correction {
			found = append(found, o)
		}
	}
	require.Len(t, found, 1)
	require.Equal(t, "l4", found[0].GPU.Model)
	require.Equal(t, "NOT_SUPPORTED", found[0].Observed)
	require.Equal(t, []string{"SUCCESS"}, found[0].Real)
	require.Contains(t, found[0].Row.Text(), fmt.Sprintf("docs/nvml-fidelity.md:%d: nvmlDeviceGetMigMode | l4 | real: SUCCESS (doctored)", rows[i].Line))
}

// TestCheckUncataloguedGPU: a GPU whose product name the catalogue lacks
// gets the rows about `all` and about the groups Options gives it.
func TestCheckUncataloguedGPU(t *testing.T) {
	data, err := models.Files.ReadFile("l4.yaml")
	require.NoError(t, err)
	model := strings.NewReplacer("name: l4", "name: t4", "productName: NVIDIA L4", "productName: Tesla T4").Replace(string(data))
	var indented []string
	for j, l := range strings.Split(strings.TrimSpace(model), "\n") {
		indented = append(indented, map[bool]string{true: "  - ", false: "    "}[j == 0]+l)
	}
	s := catalogueServer(t, "  - {model: t4, numaNode: 0}\nmodels:\n"+strings.Join(indented, "\n")+"\n")
	rows, err := Table()
	require.NoError(t, err)
	tests := []struct {
		name   string
		groups []string
		want   []string // rows checked on the T4 by call: every `all` row, plus the x86 ones
	}{
		{name: "no group", groups: nil},
		{name: "x86 host", groups: []string{GroupX86}, want: []string{"nvmlDeviceGetMemoryInfo", "nvmlDeviceGetNumaNodeId",
			"nvmlDeviceGetGpuFabricInfo", "nvmlDeviceGetGpuFabricInfoV"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Check(s, rows, Options{UncataloguedGroups: tc.groups})
			require.NoError(t, err)
			t4 := res.GPUs[len(res.GPUs)-1]
			require.Equal(t, GPU{Index: t4.Index, ProductName: "Tesla T4", Groups: tc.groups}, t4)
			var grouped []string
			for _, o := range res.Observations {
				if o.GPU.Index != t4.Index {
					continue
				}
				if o.Row.Models != "all" {
					grouped = append(grouped, o.Row.Call)
				}
			}
			require.Equal(t, tc.want, grouped)
		})
	}
}
