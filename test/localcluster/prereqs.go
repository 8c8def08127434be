package localcluster

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// PrereqsList is the list of host packages, relative to the repository
// root, that hack/prereqs.sh installs and preflight checks: one list for both.
const PrereqsList = "hack/prereqs.txt"

// hostPrereq is one line of PrereqsList: a command looked up in PATH, or an
// absolute path that must exist, and the Debian package that provides it.
type hostPrereq struct {
	Group, Check, Package string
}

// parsePrereqs reads PrereqsList's lines ("group check package why...") of
// one group.
func parsePrereqs(r io.Reader, group string) ([]hostPrereq, error) {
	var out []hostPrereq
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 3 {
			return nil, fmt.Errorf("%s:%d: want \"group check package why\", got %q", PrereqsList, n, line)
		}
		if f[0] == group {
			out = append(out, hostPrereq{Group: f[0], Check: f[1], Package: f[2]})
		}
	}
	return out, sc.Err()
}

// missingPrereqs returns "package (check)" for each entry whose check fails.
func missingPrereqs(prereqs []hostPrereq, exists func(path string) bool, inPath func(cmd string) bool) []string {
	var missing []string
	for _, p := range prereqs {
		ok := false
		if filepath.IsAbs(p.Check) {
			ok = exists(p.Check)
		} else {
			ok = inPath(p.Check)
		}
		if !ok {
			missing = append(missing, fmt.Sprintf("%s (%s)", p.Package, p.Check))
		}
	}
	return missing
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func commandInPath(cmd string) bool {
	_, err := exec.LookPath(cmd)
	return err == nil
}

// missingHostPackages checks the cluster group of the repository's
// PrereqsList on this host.
func missingHostPackages(repoRoot string) ([]string, error) {
	f, err := os.Open(filepath.Join(repoRoot, PrereqsList))
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	prereqs, err := parsePrereqs(f, "cluster")
	if err != nil {
		return nil, err
	}
	if len(prereqs) == 0 {
		return nil, fmt.Errorf("%s lists no cluster packages", filepath.Join(repoRoot, PrereqsList))
	}
	return missingPrereqs(prereqs, fileExists, commandInPath), nil
}
