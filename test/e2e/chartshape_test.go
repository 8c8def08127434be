//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/internal/plugin/cdi"
	"github.com/gpudra/gpudra/test/localcluster"
)

// TestPluginRunsInTheChartShape: each node's plugin, the process of the
// chart's DaemonSet pod, runs the real NVML/nvcdi path against its simulated
// driver root with the chart's arguments, in its own mount namespace where
// the root is mounted at /driver-root (a path that is empty on the host), in
// its own PID namespace, unprivileged (values-simulated.yaml) with no new
// privileges; a pod's CDI spec names only paths of the node, every one of
// which exists there (runc refuses others).
func TestPluginRunsInTheChartShape(t *testing.T) {
	ns := namespace(t)
	uid := podWithClaim(t, ns, "chart-shape")
	for _, node := range []string{"gpu-h100", "gpu-mixed"} {
		pid := pluginProcess(t, node)
		if got, want := nsLink(t, pid, "pid"), nsLink(t, os.Getpid(), "pid"); got == want {
			t.Errorf("%s: the plugin shares the host's PID namespace %s", node, got)
		}
		mounts, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, point := range []string{"/driver-root", "/var/run/cdi", "/var/lib/kubelet/plugins/gpu.gpudra.io", "/var/lib/kubelet/plugins_registry"} {
			if !hasMount(string(mounts), point) {
				t.Errorf("%s: nothing mounted at %s in the plugin's mount namespace:\n%s", node, point, mounts)
			}
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		args := strings.Split(string(cmdline), "\x00")
		for _, want := range []string{"--nvidia-driver-root=/driver-root", "--host-driver-root=" + localcluster.SimDriverRoot, "--cdi-root=" + localcluster.CDIDir} {
			if !slices.Contains(args, want) {
				t.Errorf("%s: plugin args %q lack %s (from the chart)", node, args, want)
			}
		}
		status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		for _, want := range []string{"Uid:\t0\t", "NoNewPrivs:\t1"} {
			if !strings.Contains(string(status), want) {
				t.Errorf("%s: the plugin's /proc status lacks %q (runAsUser 0, allowPrivilegeEscalation false):\n%s", node, want, status)
			}
		}
		if m := regexp.MustCompile(`CapEff:\s+(\S+)`).FindSubmatch(status); m == nil || string(m[1]) == "000001ffffffffff" {
			t.Errorf("%s: the plugin has every capability (privileged), want the runtime's default set: %s", node, m)
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
	node := realCluster.Node("gpu-h100")
	for _, p := range paths {
		if strings.HasPrefix(p, "/driver-root") {
			t.Errorf("the spec names the plugin's view of the driver root: %s", p)
		}
		if _, err := os.Stat(node.HostPathOf(p)); err != nil {
			t.Errorf("the spec names a path that does not exist on the node: %s: %v", p, err)
		}
		if strings.HasPrefix(p, localcluster.SimDriverRoot+"/usr/lib/") {
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

// pluginProcess is the PID of the node's plugin pod's process: the
// gpu-kubelet-plugin process in the node's pod cgroups.
func pluginProcess(t *testing.T, node string) int {
	t.Helper()
	cgroup := localcluster.CgroupParent("gpudra-"+filepath.Base(clusterDir), node) + "/pods/"
	procs, _ := filepath.Glob("/proc/[0-9]*/comm")
	var found []int
	for _, f := range procs {
		comm, err := os.ReadFile(f)
		// comm holds at most 15 bytes of the executable's name.
		name := strings.TrimSpace(string(comm))
		const executable = "gpu-kubelet-plugin"
		if err != nil || name == "" || executable[:min(len(name), len(executable))] != name {
			continue
		}
		cg, err := os.ReadFile(filepath.Join(filepath.Dir(f), "cgroup"))
		if err != nil || !strings.Contains(string(cg), cgroup) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
		found = append(found, pid)
	}
	if len(found) != 1 {
		t.Fatalf("%d gpu-kubelet-plugin processes in the cgroups %s..., want the plugin pod's one: %v", len(found), cgroup, found)
	}
	return found[0]
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
