// Package layout checks the repository's package layout against the table
// in docs/architecture.md: which program owns each shipped package, and on
// which floor it sits. The table is the one place that states the layering;
// TestLayering keeps it true against the imports.
package layout

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Package is one row of the architecture table.
type Package struct {
	Owner string
	Floor int
}

// The owners whose packages any program may import.
const (
	ownerShared = "shared"
	ownerAPI    = "api"
)

var row = regexp.MustCompile("^\\|\\s*`([^`]+)`\\s*\\|\\s*([a-z]+)\\s*\\|\\s*([0-9]+)\\s*\\|")

// ParseTable reads the package table of docs/architecture.md: rows that
// start with a backquoted package path, then its owner and floor.
func ParseTable(r io.Reader) (map[string]Package, error) {
	table := map[string]Package{}
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		m := row.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		floor, err := strconv.Atoi(m[3])
		if err != nil {
			return nil, fmt.Errorf("line %d: floor %q: %w", line, m[3], err)
		}
		if _, dup := table[m[1]]; dup {
			return nil, fmt.Errorf("line %d: package %s is listed twice", line, m[1])
		}
		table[m[1]] = Package{Owner: m[2], Floor: floor}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(table) == 0 {
		return nil, fmt.Errorf("no package rows (| `path` | owner | floor | ...) found")
	}
	return table, nil
}

// Shipped reports whether a module-relative package path is shipped code,
// which the table must list.
func Shipped(pkg string) bool {
	for _, prefix := range []string{"api/", "cmd/", "internal/"} {
		if strings.HasPrefix(pkg, prefix) || pkg+"/" == prefix {
			return true
		}
	}
	return false
}

// Violations compares the table with the import graph (module-relative
// package path -> module-relative paths of the module's packages it
// imports, test files excluded) and returns every broken rule, sorted.
func Violations(table map[string]Package, imports map[string][]string) []string {
	var out []string
	for pkg := range table {
		if _, ok := imports[pkg]; !ok {
			out = append(out, fmt.Sprintf("%s: listed in the table but no such package exists; remove its row", pkg))
		}
	}
	for pkg, deps := range imports {
		if !Shipped(pkg) {
			continue
		}
		p, ok := table[pkg]
		if !ok {
			out = append(out, fmt.Sprintf("%s: not in the table; add a row with its owner and floor", pkg))
			continue
		}
		for _, dep := range deps {
			if strings.HasPrefix(dep, "test/") {
				out = append(out, fmt.Sprintf("%s imports %s: shipped code must not import test/", pkg, dep))
				continue
			}
			d, ok := table[dep]
			if !ok {
				continue // reported as missing from the table above
			}
			if !mayImport(p.Owner, d.Owner) {
				out = append(out, fmt.Sprintf("%s (%s) imports %s (%s): a package imports only its own program's, shared or api packages", pkg, p.Owner, dep, d.Owner))
			}
			if d.Floor >= p.Floor {
				out = append(out, fmt.Sprintf("%s (floor %d) imports %s (floor %d): imports go to lower floors only", pkg, p.Floor, dep, d.Floor))
			}
		}
	}
	sort.Strings(out)
	return out
}

func mayImport(owner, dep string) bool {
	switch owner {
	case ownerAPI:
		return dep == ownerAPI
	case ownerShared:
		return dep == ownerShared || dep == ownerAPI
	default:
		return dep == owner || dep == ownerShared || dep == ownerAPI
	}
}
