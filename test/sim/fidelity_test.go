package sim

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/test/fidelity"
	"github.com/gpudra/gpudra/test/sim/models"
)

// TestFidelityDoc walks every table of docs/nvml-fidelity.md (every
// section, so rows added later are walked too) and checks each row:
//
//   - real and simulator start with a return code (SUCCESS, NOT_SUPPORTED,
//     ...); the real column may name more codes ("SUCCESS; NOT_SUPPORTED in
//     MIG mode"), the simulator's first code must be one of them;
//   - the simulator is never kinder than real NVML: where real's first
//     code is an error, the simulator does not answer SUCCESS;
//   - the test column names Test functions that exist in the repository;
//   - where test/fidelity knows how to make the call (fidelity.CallFor: the
//     read-only calls, the same the GPU kit makes on real GPUs), it loads
//     one GPU of each model the row names, in its initial state (MIG
//     disabled, idle), and the simulator answers the simulator column's
//     code.
//
// The table is the copy embedded by package docs (the file itself). The
// models column is `all`, a model group (fidelity.Groups: x86, grace,
// unified-memory; a group with no catalogue model is checked on the
// h100-sxm5-80gb with the group's `nvml:` mapping), or model names.
func TestFidelityDoc(t *testing.T) {
	rows, err := fidelity.Table()
	require.NoError(t, err)
	require.NotEmpty(t, rows)
	tests := testFunctions(t, filepath.Join("..", ".."))
	for _, r := range rows {
		t.Run(r.Section+"/"+r.Call+"/"+r.Models, func(t *testing.T) {
			real := fidelity.ReturnCodes(r.Real)
			require.NotEmpty(t, real, "line %d: the real column starts with a return code: %q", r.Line, r.Real)
			simCodes := fidelity.ReturnCodes(r.Simulator)
			require.NotEmpty(t, simCodes, "line %d: the simulator column starts with a return code: %q", r.Line, r.Simulator)
			sim := simCodes[0]
			require.Contains(t, real, sim, "line %d: the simulator answers a code real NVML gives", r.Line)
			if real[0] != nvml.SUCCESS {
				require.NotEqual(t, nvml.SUCCESS, sim, "line %d: kinder than real NVML (%s)", r.Line, r.Real)
			}
			names := regexp.MustCompile(`\bTest[A-Za-z0-9_]+`).FindAllString(r.Test, -1)
			require.NotEmpty(t, names, "line %d: the test column names a Test function", r.Line)
			for _, n := range names {
				require.True(t, tests[n], "line %d: no func %s in the repository's tests", r.Line, n)
			}
			call, known := fidelity.CallFor(r.Call)
			if !known {
				return // another test covers it (checked above)
			}
			for _, m := range fidelityModels(t, r.Models) {
				s := m.server(t)
				d, ret := s.DeviceGetHandleByIndex(0)
				require.Equal(t, nvml.SUCCESS, ret)
				require.Equal(t, fidelity.CodeName(sim), fidelity.CodeName(call(s, d, 0)), "line %d: %s on %s", r.Line, r.Call, m.name)
			}
		})
	}
}

// testFunctions lists the Test functions of every _test.go file under root.
func testFunctions(t *testing.T, root string) map[string]bool {
	t.Helper()
	re := regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]+)\(`)
	out := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "_output" || d.Name() == "hack") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllStringSubmatch(string(data), -1) {
			out[m[1]] = true
		}
		return nil
	})
	require.NoError(t, err)
	return out
}

// fidelityGroups are the model groups (fidelity.Groups) as the simulator
// maps them (capabilities.go), and the `nvml:` mapping a synthetic member of
// a group without a catalogue model gets.
var fidelityGroups = map[string]struct {
	member  func(*Model) bool
	mapping string
}{
	fidelity.GroupX86: {func(m *Model) bool { return m.NVML.NUMANodeID == NUMANodeIDNotSupported && !m.NVML.UnifiedMemory }, ""},
	fidelity.GroupGrace: {func(m *Model) bool { return m.NVML.NUMANodeID == NUMANodeIDGPUMemory },
		"nvml: {numaNodeId: gpu-memory}"},
	fidelity.GroupUnifiedMemory: {func(m *Model) bool { return m.NVML.UnifiedMemory }, "nvml: {unifiedMemory: true}"},
}

// TestFidelityCatalogue: the table package reads the catalogue as the
// simulator does: the same models, product names and groups.
func TestFidelityCatalogue(t *testing.T) {
	catalogue, err := fidelity.Catalogue()
	require.NoError(t, err)
	builtin, err := builtinModels()
	require.NoError(t, err)
	require.Len(t, catalogue, len(builtin))
	require.ElementsMatch(t, fidelity.Groups, sortedKeys(fidelityGroups))
	for _, m := range catalogue {
		sm, ok := builtin[m.Name]
		require.True(t, ok, m.Name)
		require.Equal(t, sm.ProductName, m.ProductName, m.Name)
		var groups []string
		for _, g := range fidelity.Groups {
			if fidelityGroups[g].member(sm) {
				groups = append(groups, g)
			}
		}
		require.Equal(t, groups, m.Groups, m.Name)
	}
}

// fidelityModel is a catalogue model, or a synthetic member of a group.
type fidelityModel struct {
	name    string
	mapping string // for a synthetic model: its `nvml:` mapping
}

func (m fidelityModel) server(t *testing.T) *Server {
	t.Helper()
	profile := fmt.Sprintf("name: fidelity\ndriverVersion: \"570.124.06\"\ncudaDriverVersion: \"12.8\"\ngpus: [{model: %s, numaNode: 0}]\n", m.name)
	if m.mapping != "" {
		data, err := models.Files.ReadFile("h100-sxm5-80gb.yaml")
		require.NoError(t, err)
		model := strings.Replace(string(data), "name: h100-sxm5-80gb", "name: "+m.name, 1) + m.mapping + "\n"
		var indented []string
		for i, l := range strings.Split(model, "\n") {
			prefix := "    "
			if i == 0 {
				prefix = "  - "
			}
			indented = append(indented, prefix+l)
		}
		profile += "models:\n" + strings.Join(indented, "\n") + "\n"
	}
	p, err := Parse([]byte(profile))
	require.NoError(t, err)
	s := NewServer(p, "fidelity")
	require.Equal(t, nvml.SUCCESS, s.Init())
	t.Cleanup(func() { _ = s.Shutdown() })
	return s
}

func fidelityModels(t *testing.T, col string) []fidelityModel {
	t.Helper()
	catalogue, err := fidelity.Catalogue()
	require.NoError(t, err)
	sel, err := fidelity.ParseModels(col, catalogue)
	require.NoError(t, err)
	var out []fidelityModel
	for _, m := range catalogue {
		if sel.Applies(m.Name, m.Groups) {
			out = append(out, fidelityModel{name: m.Name})
		}
	}
	for _, g := range sel.Groups {
		if !slices.ContainsFunc(catalogue, func(m fidelity.Model) bool { return slices.Contains(m.Groups, g) }) {
			out = append(out, fidelityModel{name: "synthetic-" + g, mapping: fidelityGroups[g].mapping})
		}
	}
	return out
}
