package cdi

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/internal/plugin/discovery"
	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/test/fakedriver"
	"github.com/gpudra/gpudra/test/sim"
)

// TestNvcdiEditsNameHostPaths: the plugin in its pod sees the driver root at
// one path (the chart's /driver-root), the host at another. Every host path
// in the edits must be under the host's root and name a file that exists
// there; none may be the plugin's own view. Before --host-driver-root the
// specs named the plugin's view, which a container runtime on the host
// cannot resolve.
func TestNvcdiEditsNameHostPaths(t *testing.T) {
	seen, srv, node := nvcdiFixture(t)
	const host = "/host/run/nvidia/driver"
	// A toolkit's hook in the root (the fake root brings none).
	require.NoError(t, os.WriteFile(seen+"/usr/bin/nvidia-cdi-hook", []byte("#!/bin/sh\n"), 0o755))

	for _, tc := range []struct {
		name     string
		opts     NvcdiOptions
		wantRoot string
	}{
		{"plugin on the host", NvcdiOptions{DriverRoot: seen, HookPath: seen + "/usr/bin/nvidia-cdi-hook"}, seen},
		{"plugin in a pod", NvcdiOptions{DriverRoot: seen, HostDriverRoot: host, HookPath: host + "/usr/bin/nvidia-cdi-hook"}, host},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := NewNvcdiEdits(t.Context(), srv, tc.opts)
			require.NoError(t, err)
			edits, err := NewCachedEdits(n, node.GPUs)
			require.NoError(t, err)
			all := []*cdispec.ContainerEdits{edits.common}
			for _, e := range edits.devices {
				all = append(all, e)
			}
			var libs int
			for _, e := range all {
				for _, hp := range HostPaths(e) {
					p := hp.Path
					require.True(t, strings.HasPrefix(p, tc.wantRoot+"/"), "host path %s is not under %s", p, tc.wantRoot)
					// The same file, seen from here.
					_, err := os.Lstat(seen + strings.TrimPrefix(p, tc.wantRoot))
					require.NoError(t, err, "host path %s names no file of the root", p)
					if strings.Contains(p, "/usr/lib/") {
						libs++
					}
				}
			}
			require.Positive(t, libs, "nvcdi found the root's driver libraries")
			require.Len(t, edits.devices, len(node.GPUs))
		})
	}
}

// nvcdiFixture generates a fake driver root for a simulated dgx-a100 node
// and returns it, the simulated NVML (initialized) and the discovered node.
func nvcdiFixture(t *testing.T) (string, *sim.Server, *model.Node) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("a fake driver root has device nodes: run the tests as root")
	}
	dir := t.TempDir()
	// The plugin's view of the root: generated here.
	seen := filepath.Join(dir, "driver-root")
	// Stand-ins: nvcdi gets the simulated NVML in process, and runs no tool.
	standIns := []string{"libnvidia-ml.so"}
	for _, tool := range fakedriver.Tools {
		standIns = append(standIns, tool)
	}
	for _, f := range standIns {
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), []byte("stand-in"), 0o755))
	}
	require.NoError(t, fakedriver.Generate(fakedriver.Options{Dir: seen, Profile: "dgx-a100", Node: "n1",
		NVMLLibrary: filepath.Join(dir, "libnvidia-ml.so"), ToolsDir: dir}))

	p, err := sim.Load("dgx-a100", nil)
	require.NoError(t, err)
	srv := sim.NewServer(p, "n1")
	require.Equal(t, nvml.SUCCESS, srv.Init())
	t.Cleanup(func() { _ = srv.Shutdown() })
	node, err := discovery.Discover(t.Context(), srv, discovery.Options{})
	require.NoError(t, err)
	return seen, srv, node
}

// TestNvcdiLogsThroughKlog: nvcdi's messages (its warnings about optional
// libraries the root lacks, its infos about the files it selects) reach the
// caller's klog logger, structured, and none reaches stderr in logrus's
// format. Before, nvcdi used the logrus standard logger: on a real H200
// host about 160 'time="..." level=warning msg="Could not locate ..."'
// lines in the middle of the plugin's klog output.
func TestNvcdiLogsThroughKlog(t *testing.T) {
	seen, srv, node := nvcdiFixture(t)
	stderr := captureStderr(t)
	var buf bytes.Buffer
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(7), textlogger.Output(&buf)))
	n, err := NewNvcdiEdits(klog.NewContext(t.Context(), logger), srv, NvcdiOptions{DriverRoot: seen})
	require.NoError(t, err)
	_, err = NewCachedEdits(n, node.GPUs)
	require.NoError(t, err)

	out := stderr()
	require.NotRegexp(t, `level=(warning|info|debug|trace|error) msg=`, out, "nvcdi logged through logrus")
	got := buf.String()
	require.Regexp(t, `(?m)^I.*\] "Could not locate .*" logger="nvcdi" level="warning"$`, got,
		"the fake root lacks optional libraries: nvcdi warns, through klog")
	require.Regexp(t, `(?m)^I.*\] "Selecting .* as .*" logger="nvcdi" level="info"$`, got)
}

// TestNvcdiProductionFlags: the production options disable
// nvsandboxutils, as NVIDIA's DRA driver does. With it enabled, nvcdi looks
// for libnvidia-sandboxutils.so.1 under the driver root (and warns when
// the root, like this fake one, has none).
func TestNvcdiProductionFlags(t *testing.T) {
	seen, srv, node := nvcdiFixture(t)
	var buf bytes.Buffer
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(7), textlogger.Output(&buf)))
	n, err := NewNvcdiEdits(klog.NewContext(t.Context(), logger), srv, NvcdiOptions{DriverRoot: seen})
	require.NoError(t, err)
	_, err = NewCachedEdits(n, node.GPUs)
	require.NoError(t, err)
	require.Contains(t, buf.String(), `logger="nvcdi"`, "nvcdi logs through this logger")
	for _, line := range strings.Split(buf.String(), "\n") {
		require.NotContains(t, line, "libnvidia-sandboxutils", "nvcdi never looks for libnvidia-sandboxutils")
	}
}

// captureStderr sends file descriptor 2 (where logrus's standard logger
// writes, whatever os.Stderr is) to a file until the returned function,
// which restores it and returns what was written, is called.
func captureStderr(t *testing.T) func() string {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	require.NoError(t, err)
	saved, err := syscall.Dup(2)
	require.NoError(t, err)
	require.NoError(t, syscall.Dup3(int(f.Fd()), 2, 0))
	restored := false
	restore := func() {
		if !restored {
			restored = true
			_ = syscall.Dup3(saved, 2, 0)
			_ = syscall.Close(saved)
		}
	}
	t.Cleanup(restore)
	return func() string {
		restore()
		b, err := os.ReadFile(f.Name())
		require.NoError(t, err)
		_ = f.Close()
		return string(b)
	}
}

// TestProcMIGCapsHostDevRoot: capability nodes of a driver root that brings
// its own dev/ are named at the host's path of that root.
func TestProcMIGCapsHostDevRoot(t *testing.T) {
	proc := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(proc, "driver/nvidia-caps"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(proc, "devices"), []byte("Character devices:\n122 nvidia-caps\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(proc, "driver/nvidia-caps/mig-minors"),
		[]byte("gpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n"), 0o644))
	for _, tc := range []struct{ hostDev, want string }{
		{"/", ""},
		{"/run/nvidia/driver", "/run/nvidia/driver/dev/nvidia-caps/nvidia-cap12"},
	} {
		c, err := NewProcMIGCaps(proc, tc.hostDev)
		require.NoError(t, err)
		nodes, err := c.Nodes(0, 1, 0)
		require.NoError(t, err)
		require.Len(t, nodes, 2)
		require.Equal(t, "/dev/nvidia-caps/nvidia-cap12", nodes[0].Path)
		require.Equal(t, tc.want, nodes[0].HostPath)
		require.EqualValues(t, 122, nodes[0].Major)
		require.EqualValues(t, 13, nodes[1].Minor)
	}
}
