package layout

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/test/repo"
)

const module = "github.com/gpudra/gpudra"

// TestLayering checks docs/architecture.md's package table against the
// imports of every package, with every build tag the repository uses.
func TestLayering(t *testing.T) {
	root, err := repo.Root()
	require.NoError(t, err)
	f, err := os.Open(filepath.Join(root, "docs", "architecture.md"))
	require.NoError(t, err)
	defer f.Close()
	table, err := ParseTable(f)
	require.NoError(t, err)

	cmd := exec.Command("go", "list", "-tags", "e2e,failpoints,faults", "-f", "{{.ImportPath}}\t{{join .Imports \" \"}}", "./...")
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go list")
	imports := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, deps, _ := strings.Cut(line, "\t")
		pkg = strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
		imports[pkg] = nil
		for _, dep := range strings.Fields(deps) {
			if rel, ok := strings.CutPrefix(dep, module+"/"); ok {
				imports[pkg] = append(imports[pkg], rel)
			}
		}
	}
	require.Contains(t, imports, "internal/plugin", "go list found the module's packages")
	for _, v := range Violations(table, imports) {
		t.Error(v)
	}
}

func TestViolations(t *testing.T) {
	table := map[string]Package{
		"api/v1alpha1":          {Owner: "api", Floor: 1},
		"internal/shared/names": {Owner: "shared", Floor: 1},
		"internal/plugin/model": {Owner: "plugin", Floor: 1},
		"internal/plugin":       {Owner: "plugin", Floor: 2},
		"internal/controller":   {Owner: "controller", Floor: 2},
	}
	tests := []struct {
		name    string
		imports map[string][]string
		want    []string
	}{{
		name: "clean",
		imports: map[string][]string{
			"api/v1alpha1": nil, "internal/shared/names": nil, "internal/plugin/model": nil,
			"internal/plugin": {"internal/plugin/model", "internal/shared/names", "api/v1alpha1"}, "internal/controller": {"api/v1alpha1"},
			"test/sim": {"internal/plugin"},
		},
	}, {
		name: "upward import and cross-owner import",
		imports: map[string][]string{
			"api/v1alpha1": nil, "internal/shared/names": nil, "internal/plugin/model": {"internal/plugin"},
			"internal/plugin": nil, "internal/controller": {"internal/plugin/model"},
		},
		want: []string{
			"internal/controller (controller) imports internal/plugin/model (plugin): a package imports only its own program's, shared or api packages",
			"internal/plugin/model (floor 1) imports internal/plugin (floor 2): imports go to lower floors only",
		},
	}, {
		name: "shared and api import only downwards in ownership",
		imports: map[string][]string{
			"api/v1alpha1": {"internal/shared/names"}, "internal/shared/names": {"internal/plugin/model"}, "internal/plugin/model": nil,
			"internal/plugin": nil, "internal/controller": nil,
		},
		want: []string{
			"api/v1alpha1 (api) imports internal/shared/names (shared): a package imports only its own program's, shared or api packages",
			"api/v1alpha1 (floor 1) imports internal/shared/names (floor 1): imports go to lower floors only",
			"internal/shared/names (floor 1) imports internal/plugin/model (floor 1): imports go to lower floors only",
			"internal/shared/names (shared) imports internal/plugin/model (plugin): a package imports only its own program's, shared or api packages",
		},
	}, {
		name: "missing row, stale row, test import",
		imports: map[string][]string{
			"api/v1alpha1": nil, "internal/shared/names": nil, "internal/plugin/model": {"test/sim"},
			"internal/plugin": nil, "internal/plugin/new": nil,
		},
		want: []string{
			"internal/controller: listed in the table but no such package exists; remove its row",
			"internal/plugin/model imports test/sim: shipped code must not import test/",
			"internal/plugin/new: not in the table; add a row with its owner and floor",
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, Violations(table, tt.imports))
		})
	}
}

func TestParseTable(t *testing.T) {
	got, err := ParseTable(strings.NewReader("# x\n| package | owner | floor | what |\n|---|---|---|---|\n| `api/v1alpha1` | api | 1 | types |\n| `internal/plugin` | plugin | 5 | the plugin |\ntext\n"))
	require.NoError(t, err)
	require.Equal(t, map[string]Package{"api/v1alpha1": {Owner: "api", Floor: 1}, "internal/plugin": {Owner: "plugin", Floor: 5}}, got)

	_, err = ParseTable(strings.NewReader("| `a` | api | 1 |\n| `a` | api | 2 |\n"))
	require.ErrorContains(t, err, "listed twice")
	_, err = ParseTable(strings.NewReader("no table\n"))
	require.ErrorContains(t, err, "no package rows")
}
