package sim

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"
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
//   - where this test knows how to make the call (fidelityCalls), it loads
//     one GPU of each model the row names, in its initial state (MIG
//     disabled, idle), and the simulator answers the simulator column's
//     code.
//
// The models column is `all`, a model group (fidelityGroups: x86, grace,
// unified-memory; a group with no catalogue model is checked on the
// h100-sxm5-80gb with the group's `nvml:` mapping), or model names.
func TestFidelityDoc(t *testing.T) {
	rows := readFidelityRows(t, filepath.Join("..", "..", "docs", "nvml-fidelity.md"))
	require.NotEmpty(t, rows)
	tests := testFunctions(t, filepath.Join("..", ".."))
	for _, r := range rows {
		t.Run(r.section+"/"+r.call+"/"+r.models, func(t *testing.T) {
			real := returnCodes(r.real)
			require.NotEmpty(t, real, "line %d: the real column starts with a return code: %q", r.line, r.real)
			simCodes := returnCodes(r.simulator)
			require.NotEmpty(t, simCodes, "line %d: the simulator column starts with a return code: %q", r.line, r.simulator)
			sim := simCodes[0]
			require.Contains(t, real, sim, "line %d: the simulator answers a code real NVML gives", r.line)
			if real[0] != nvml.SUCCESS {
				require.NotEqual(t, nvml.SUCCESS, sim, "line %d: kinder than real NVML (%s)", r.line, r.real)
			}
			names := regexp.MustCompile(`\bTest[A-Za-z0-9_]+`).FindAllString(r.test, -1)
			require.NotEmpty(t, names, "line %d: the test column names a Test function", r.line)
			for _, n := range names {
				require.True(t, tests[n], "line %d: no func %s in the repository's tests", r.line, n)
			}
			call, known := fidelityCalls[r.call]
			if !known {
				return // another test covers it (checked above)
			}
			for _, m := range fidelityModels(t, r.models) {
				got := call(t, m.server(t))
				require.Equal(t, sim, got, "line %d: %s on %s", r.line, r.call, m.name)
			}
		})
	}
}

type fidelityRow struct {
	section, call, models, real, source, simulator, test string
	line                                                 int
}

func readFidelityRows(t *testing.T, path string) []fidelityRow {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	var rows []fidelityRow
	section := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if s, ok := strings.CutPrefix(line, "## "); ok {
			section = s
			continue
		}
		if !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "| call ") || strings.HasPrefix(line, "|---") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		require.Len(t, cells, 6, "line %d: a row has six columns: %s", n, line)
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		rows = append(rows, fidelityRow{section: section, call: strings.Trim(cells[0], "`"), models: cells[1],
			real: cells[2], source: cells[3], simulator: cells[4], test: cells[5], line: n})
	}
	require.NoError(t, sc.Err())
	return rows
}

var codeRE = regexp.MustCompile(`\b[A-Z][A-Z_]{3,}[A-Z]\b`)

// returnCodes are the NVML return codes a column names, in order; the
// column must start with one.
func returnCodes(col string) []nvml.Return {
	var out []nvml.Return
	for i, w := range codeRE.FindAllStringIndex(col, -1) {
		word := col[w[0]:w[1]]
		ret, ok := returnByName(word)
		if i == 0 && (w[0] != 0 || !ok) {
			return nil
		}
		if ok {
			out = append(out, ret)
		}
	}
	return out
}

func returnByName(name string) (nvml.Return, bool) {
	for r := nvml.Return(0); r <= 999; r++ {
		s := r.String()
		if s == name || s == "ERROR_"+name {
			return r, true
		}
	}
	return 0, false
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

// fidelityGroups are model groups by the `nvml:` mapping (capabilities.go).
var fidelityGroups = map[string]struct {
	member  func(*Model) bool
	mapping string // the mapping a synthetic member gets
}{
	"x86": {func(m *Model) bool { return m.NVML.NUMANodeID == NUMANodeIDNotSupported && !m.NVML.UnifiedMemory }, ""},
	"grace": {func(m *Model) bool { return m.NVML.NUMANodeID == NUMANodeIDGPUMemory },
		"nvml: {numaNodeId: gpu-memory}"},
	"unified-memory": {func(m *Model) bool { return m.NVML.UnifiedMemory }, "nvml: {unifiedMemory: true}"},
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
		data, err := modelFiles.ReadFile("models/h100-sxm5-80gb.yaml")
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
	catalogue, err := builtinModels()
	require.NoError(t, err)
	names := sortedKeys(catalogue)
	var out []fidelityModel
	for _, item := range strings.Split(col, ",") {
		item = strings.Trim(strings.TrimSpace(item), "`")
		if item == "all" {
			for _, n := range names {
				out = append(out, fidelityModel{name: n})
			}
			continue
		}
		if g, ok := fidelityGroups[item]; ok {
			before := len(out)
			for _, n := range names {
				if g.member(catalogue[n]) {
					out = append(out, fidelityModel{name: n})
				}
			}
			if len(out) == before {
				out = append(out, fidelityModel{name: "synthetic-" + item, mapping: g.mapping})
			}
			continue
		}
		require.True(t, slices.Contains(names, item), "unknown model or group %q: known %v and groups x86, grace, unified-memory", item, names)
		out = append(out, fidelityModel{name: item})
	}
	return out
}
