package gpuverify

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/internal/plugin/nvmllib"
	"github.com/gpudra/gpudra/test/fakedriver"
)

// generatedRoot is a fake driver root from test/fakedriver for profile and
// the simRun's node, with stand-ins for the simulated library and the fake
// tools: NVML stays in process here, nvcdi reads the root as on a real node.
func generatedRoot(t *testing.T, profile string) string {
	if os.Geteuid() != 0 {
		t.Skip("a fake driver root has device nodes: run as root")
	}
	in := t.TempDir()
	lib := filepath.Join(in, "libnvidia-ml-sim.so")
	require.NoError(t, os.WriteFile(lib, []byte("stand-in: NVML is simulated in process\n"), 0o755))
	for _, tool := range fakedriver.Tools {
		require.NoError(t, os.WriteFile(filepath.Join(in, tool), []byte("#!/bin/sh\nexit 1\n"), 0o755))
	}
	root := filepath.Join(t.TempDir(), "driver-root")
	require.NoError(t, fakedriver.Generate(fakedriver.Options{Dir: root, Profile: profile, Node: "verify-node",
		NVMLLibrary: lib, ToolsDir: in}))
	return root
}

// okHook stands in for nvidia-cdi-hook: it starts.
const okHook = "#!/bin/sh\nexit 0\n"

// TestNvcdiEdits runs the kit with the edits the plugin computes on a real
// node (nvcdi, the plugin's rule for the roots) over a generated fake driver
// root, with NVML simulated in process for the same profile and node.
func TestNvcdiEdits(t *testing.T) {
	tests := []struct {
		name, profile, hook string // hook: path under the root; empty: nvcdi's default
		script              string // the hook's content; empty: none is installed
		want                string // substring of a failure; empty: all pass
	}{
		{name: "whole GPUs", profile: "l4", hook: "/usr/bin/nvidia-cdi-hook", script: okHook},
		{name: "static MIG", profile: "../../internal/plugin/slice/testdata/static-mig.yaml", hook: "/usr/bin/nvidia-cdi-hook", script: okHook},
		{name: "hook missing", profile: "l4", hook: "/usr/local/bin/nvidia-cdi-hook", want: "/usr/local/bin/nvidia-cdi-hook: stat"},
		// Like a hook linked against a newer C library than the host's.
		{name: "hook does not start", profile: "l4", hook: "/usr/bin/nvidia-cdi-hook",
			script: "#!/bin/sh\necho \"version 'GLIBC_2.99' not found\" >&2\nexit 1\n", want: "does not start on this host"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := generatedRoot(t, tc.profile)
			if tc.script != "" {
				require.NoError(t, os.MkdirAll(filepath.Dir(root+tc.hook), 0o755))
				require.NoError(t, os.WriteFile(root+tc.hook, []byte(tc.script), 0o755))
			}
			r := newSimRun(t, tc.profile)
			roots := nvmllib.DriverRoots(root, "")
			require.Equal(t, nvmllib.Roots{Driver: root, HostDriver: root, Dev: root, HostDev: root,
				Proc: root + "/proc", Sys: root + "/sys"}, roots)
			r.cfg.Edits = NvcdiEdits(roots, root+tc.hook)
			r.cfg.DriverRoot, r.cfg.SysfsRoot, r.cfg.Roots = root, roots.Sys, &roots
			rep, _ := r.run()
			got := strings.Join(failures(rep), "\n")
			if tc.want != "" {
				require.Contains(t, got, tc.want)
				return
			}
			require.Empty(t, got)
			c := rep.Claims[len(rep.Claims)-1]
			require.Contains(t, c.HostPaths, root+"/dev/nvidiactl")
			require.Contains(t, c.HostPaths, root+"/usr/bin/nvidia-cdi-hook")
			for _, p := range c.HostPaths {
				require.True(t, strings.HasPrefix(p, root+"/"), "host path %s outside the driver root", p)
			}
		})
	}
}
