//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gpudra/gpudra/test/e2elogs"
	"github.com/gpudra/gpudra/test/fakedriver"
)

// What a failed test leaves for its diagnosis. Every container log of the
// driver's namespace is kept while the suite runs (e2elogs.Keeper: a
// deleted plugin pod's log is otherwise gone with it), in
// <E2E_ARTIFACTS>/<run>/pods; a test that fails gets
// <run>/failures/<test>/ with those logs' and the cluster components' lines
// from its start to its end, the cluster's objects and each node's simulated
// NVML state, and its own output ends with the last lines of the driver's
// logs. A run without failures removes its directory; the last few runs
// with failures are kept.
var (
	runArtifacts string
	podLogs      *e2elogs.Keeper
)

const (
	keptRuns       = 5  // runs with failures kept in E2E_ARTIFACTS
	excerptLines   = 25 // the last lines of each driver container log in a failed test's output
	excerptMaxLogs = 16
	windowSlack    = 5 * time.Second
)

// startArtifacts starts keeping the driver's logs; the function it returns
// stops that and removes the run's directory unless a test failed.
func startArtifacts() (func(failed bool), error) {
	root := os.Getenv("E2E_ARTIFACTS")
	if root == "" {
		root = filepath.Join(repoRoot, "_output", "e2e-artifacts")
	}
	runArtifacts = filepath.Join(root, time.Now().UTC().Format("20060102T150405Z"))
	k, err := e2elogs.Start(context.Background(), client, realCluster.Config().Namespace, filepath.Join(runArtifacts, "pods"))
	if err != nil {
		return nil, fmt.Errorf("keep the driver's logs: %w", err)
	}
	podLogs = k
	return func(failed bool) {
		k.Stop()
		if _, err := os.Stat(filepath.Join(runArtifacts, "failures")); err != nil && !failed {
			_ = os.RemoveAll(runArtifacts)
		}
		pruneRuns(root)
	}, nil
}

// pruneRuns keeps the last keptRuns runs' directories.
func pruneRuns(root string) {
	runs, _ := filepath.Glob(filepath.Join(root, "2*Z"))
	sort.Strings(runs)
	for len(runs) > keptRuns {
		_ = os.RemoveAll(runs[0])
		runs = runs[1:]
	}
}

// keepFailure makes t, if it fails, leave its diagnosis (above). The window
// starts at the first call.
func keepFailure(t testing.TB) {
	if podLogs != nil {
		e2elogs.OnFailure(t, diagnoseFailure)
	}
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func diagnoseFailure(t testing.TB, start time.Time) {
	dir := failureDir(filepath.Join(runArtifacts, "failures", unsafeName.ReplaceAllString(t.Name(), "_")))
	from, to := start.Add(-windowSlack), time.Now().Add(windowSlack)
	var problems []string
	pods, err := e2elogs.CopyWindows(filepath.Join(dir, "pods"), podLogs.Dir(), from, to)
	if err != nil {
		problems = append(problems, err.Error())
	}
	if _, err := e2elogs.CopyWindows(filepath.Join(dir, "cluster"), realCluster.LogDir(), from, to); err != nil {
		problems = append(problems, err.Error())
	}
	if err := writeClusterState(filepath.Join(dir, "state.txt")); err != nil {
		problems = append(problems, err.Error())
	}
	for _, n := range realCluster.Config().Nodes {
		b, err := os.ReadFile(filepath.Join(realCluster.Node(n.Name).DriverRoot(), fakedriver.StateFile))
		if err == nil {
			_ = os.MkdirAll(filepath.Join(dir, "nvml-state"), 0o755)
			_ = os.WriteFile(filepath.Join(dir, "nvml-state", n.Name+".json"), b, 0o644)
		}
	}
	var out strings.Builder
	fmt.Fprintf(&out, "diagnosis of this failure in %s (the driver's logs, the cluster's component logs from %s, its objects, each node's simulated NVML state)",
		dir, from.UTC().Format("15:04:05"))
	if len(problems) > 0 {
		fmt.Fprintf(&out, "; not all of it: %s", strings.Join(problems, "; "))
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	for i, p := range pods {
		if i == excerptMaxLogs {
			fmt.Fprintf(&out, "\n(%d more driver logs in %s)", len(pods)-i, filepath.Join(dir, "pods"))
			break
		}
		b, err := os.ReadFile(filepath.Join(dir, "pods", p.Name))
		if err != nil {
			continue
		}
		fmt.Fprintf(&out, "\n--- %s: the last %d of %d lines in the window\n%s", p.Name, min(excerptLines, p.Lines), p.Lines, e2elogs.Tail(string(b), excerptLines))
	}
	t.Log(out.String())
}

// failureDir makes the directory of one failed run of a test: base, or
// base-2, base-3, ... for the further runs of go test -count, so that no run
// writes over another's files.
func failureDir(base string) string {
	_ = os.MkdirAll(filepath.Dir(base), 0o755)
	dir := base
	for i := 2; os.Mkdir(dir, 0o755) != nil && i < 1000; i++ {
		dir = fmt.Sprintf("%s-%d", base, i)
	}
	return dir
}

// writeClusterState writes what the cluster holds at the failure.
func writeClusterState(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	var b strings.Builder
	for _, args := range [][]string{
		{"get", "nodes,pods,resourceclaims,daemonsets,deployments", "-A", "-o", "wide"},
		{"get", "events", "-A", "--sort-by=.lastTimestamp"},
		{"get", "resourceslices,deviceclasses", "-o", "yaml"},
		{"get", "resourceclaims", "-A", "-o", "yaml"},
	} {
		out, err := kubectl(args...)
		fmt.Fprintf(&b, "$ kubectl %s\n%s\n", strings.Join(args, " "), out)
		if err != nil {
			fmt.Fprintf(&b, "(%v)\n", err)
		}
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("write the cluster's state: %w", err)
	}
	return nil
}
