//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/pkg/cdi"
)

// TestPluginRunsInTheChartShape: each node's plugin runs the real NVML/nvcdi
// path against its simulated driver root, in its own mount namespace where
// the root is mounted at the chart's /driver-root (a path that is empty on
// the host), and in its own PID namespace; a pod's CDI spec names only host
// paths, every one of which exists (the fake runtime refuses others, as
// runc does).
func TestPluginRunsInTheChartShape(t *testing.T) {
	requireFakeRuntime(t, "checks the host-process plugin against the chart's shape; on containerd the chart's pod itself runs it")
	ns := namespace(t)
	uid := podWithClaim(t, ns, "chart-shape")
	for _, node := range []string{"gpu-h100", "gpu-mixed"} {
		pid := componentPID(t, "plugin-"+node)
		child := onlyChild(t, pid) // unshare --fork: the plugin is its child
		if got, want := nsLink(t, child, "pid"), nsLink(t, os.Getpid(), "pid"); got == want {
			t.Errorf("%s: the plugin shares the host's PID namespace %s", node, got)
		}
		mounts, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", child))
		if err != nil {
			t.Fatal(err)
		}
		if !hasMount(string(mounts), "/driver-root") {
			t.Errorf("%s: nothing mounted at /driver-root in the plugin's mount namespace:\n%s", node, mounts)
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", child))
		args := strings.Split(string(cmdline), "\x00")
		for _, want := range []string{"--nvidia-driver-root=/driver-root", "--host-driver-root=" + driverRoot(node)} {
			if !slices.Contains(args, want) {
				t.Errorf("%s: plugin args %q lack %s (from the chart)", node, args, want)
			}
		}
	}
	if entries, _ := os.ReadDir("/driver-root"); len(entries) != 0 {
		t.Errorf("/driver-root on the host is not empty: %v", entries)
	}

	raw, err := os.ReadFile(specPath("gpu-h100", uid))
	if err != nil {
		t.Fatal(err)
	}
	var spec cdispec.Spec
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatal(err)
	}
	paths := specHostPaths(&spec.ContainerEdits)
	for _, d := range spec.Devices {
		paths = append(paths, specHostPaths(&d.ContainerEdits)...)
	}
	var libs int
	for _, p := range paths {
		if strings.HasPrefix(p, "/driver-root") {
			t.Errorf("the spec names the plugin's view of the driver root: %s", p)
		}
		if _, err := os.Stat(p); err != nil {
			t.Errorf("the spec names a host path that does not exist: %v", err)
		}
		if strings.HasPrefix(p, driverRoot("gpu-h100")+"/usr/lib/") {
			libs++
		}
	}
	if libs == 0 {
		t.Errorf("nvcdi mounted no driver library of the driver root; host paths: %v", paths)
	}
	t.Logf("the claim's spec names %d host paths (%d driver libraries), all present", len(paths), libs)
}

func specHostPaths(e *cdispec.ContainerEdits) []string {
	var out []string
	for _, p := range cdi.HostPaths(e) {
		out = append(out, p.Path)
	}
	return out
}

func componentPID(t *testing.T, name string) int {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(clusterDir, "pids", name+".pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func onlyChild(t *testing.T, pid int) int {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(raw))
	if len(f) != 1 {
		t.Fatalf("process %d has children %v, want the plugin alone", pid, f)
	}
	child, _ := strconv.Atoi(f[0])
	return child
}

func nsLink(t *testing.T, pid int, kind string) string {
	t.Helper()
	l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, kind))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// hasMount tells whether mountinfo lists a mount point (5th field).
func hasMount(mountinfo, point string) bool {
	for _, line := range strings.Split(mountinfo, "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == point {
			return true
		}
	}
	return false
}
