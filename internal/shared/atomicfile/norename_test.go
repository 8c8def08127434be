package atomicfile

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/test/repo"
)

// renameAllowed lists the non-test files that may rename files (os.Rename,
// rawfile.Rename or the system call itself), with the
// number of calls each may have and why. Everything else that replaces a
// file goes through this package.
var renameAllowed = map[string]struct {
	calls  int
	reason string
}{
	"internal/shared/atomicfile/atomicfile.go": {1, "the writer itself"},
	"internal/shared/rawfile/rawfile.go":       {1, "the rename(2) under the writer's rawfile.Rename"},
	"test/fakedriver/fortest.go": {2, "publishes binaries that `go build -o` wrote under a per-process name, " +
		"so that parallel test binaries never run a half-written one; the content is another process's output, " +
		"not a file this code writes, and it is a build cache, not persistent state"},
	"test/nvmlsim/build.go": {1, "publishes the simulated library that `go build -o` wrote under a per-process name, " +
		"for tests that start the fake tools; a build cache, not persistent state"},
	"test/fakedriver/fmroot.go": {1, "publishes the simulated libnvfm that `go build -o` wrote under a per-process name, " +
		"for the tests that share one Fabric Manager root; a build cache, not persistent state"},
}

// TestNoRenameOutsideWriter fails when a non-test .go file of the module
// renames a file without an entry in renameAllowed: a file replaced by
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
			t.Errorf("%s renames a file:\n\t%s\nreplace the file with atomicfile.WriteFile or atomicfile.Write, "+
				"or, if this rename is not a write of a persistent file, add it to renameAllowed with the reason",
				file, strings.Join(hits, "\n\t"))
			continue
		}
		if len(hits) != allowed.calls {
			t.Errorf("%s renames files %d times; renameAllowed allows %d (%s):\n\t%s",
				file, len(hits), allowed.calls, allowed.reason, strings.Join(hits, "\n\t"))
		}
	}
	for file := range renameAllowed {
		if _, ok := found[file]; !ok {
			t.Errorf("renameAllowed lists %s, which no longer renames a file; remove the entry", file)
		}
	}
}

// renameCall matches a call that renames a file.
var renameCall = regexp.MustCompile(`\b(os|rawfile|unix|syscall)\.Rename(at2?)?\(`)

// renameCalls returns the lines of file that rename a file, as "line: text".
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
		if renameCall.MatchString(line) {
			hits = append(hits, fmt.Sprintf("%d: %s", n, line))
		}
	}
	return hits, sc.Err()
}
