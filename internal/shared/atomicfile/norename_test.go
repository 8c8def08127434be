package atomicfile

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/test/repo"
)

// renameAllowed lists the non-test files that may call os.Rename, with the
// number of calls each may have and why. Everything else that replaces a
// file goes through this package.
var renameAllowed = map[string]struct {
	calls  int
	reason string
}{
	"internal/shared/atomicfile/atomicfile.go": {1, "the writer itself"},
	"test/fakedriver/fortest.go": {2, "publishes binaries that `go build -o` wrote under a per-process name, " +
		"so that parallel test binaries never run a half-written one; the content is another process's output, " +
		"not a file this code writes, and it is a build cache, not persistent state"},
	"test/nvmlsim/build.go": {1, "publishes the simulated library that `go build -o` wrote under a per-process name, " +
		"for tests that start the fake tools; a build cache, not persistent state"},
	"test/fakedriver/fmroot.go": {1, "publishes the simulated libnvfm that `go build -o` wrote under a per-process name, " +
		"for the tests that share one Fabric Manager root; a build cache, not persistent state"},
}

// TestNoRenameOutsideWriter fails when a non-test .go file of the module
// calls os.Rename without an entry in renameAllowed: a file replaced by
// hand would miss the writer's fsyncs or its temp file conventions.
func TestNoRenameOutsideWriter(t *testing.T) {
	root, err := repo.Root()
	require.NoError(t, err)
	found := map[string][]string{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			// What the go tool ignores: hidden and _-prefixed
			// directories (.git, _output) and testdata.
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		hits, err := renameCalls(path)
		if err != nil {
			return err
		}
		if len(hits) > 0 {
			found[filepath.ToSlash(rel)] = hits
		}
		return nil
	})
	require.NoError(t, err)
	require.Contains(t, found, "internal/shared/atomicfile/atomicfile.go", "the scan must see the writer's own rename")
	for file, hits := range found {
		allowed, ok := renameAllowed[file]
		if !ok {
			t.Errorf("%s calls os.Rename:\n\t%s\nreplace the file with atomicfile.WriteFile or atomicfile.Write, "+
				"or, if this rename is not a write of a persistent file, add it to renameAllowed with the reason",
				file, strings.Join(hits, "\n\t"))
			continue
		}
		if len(hits) != allowed.calls {
			t.Errorf("%s calls os.Rename %d times; renameAllowed allows %d (%s):\n\t%s",
				file, len(hits), allowed.calls, allowed.reason, strings.Join(hits, "\n\t"))
		}
	}
	for file := range renameAllowed {
		if _, ok := found[file]; !ok {
			t.Errorf("renameAllowed lists %s, which no longer calls os.Rename; remove the entry", file)
		}
	}
}

// renameCalls returns the lines of file that call os.Rename, as "line: text".
func renameCalls(file string) ([]string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var hits []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "//") {
			continue
		}
		if strings.Contains(line, "os.Rename(") {
			hits = append(hits, fmt.Sprintf("%d: %s", n, line))
		}
	}
	return hits, sc.Err()
}
