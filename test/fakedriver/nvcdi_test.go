package fakedriver

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi"
	"github.com/stretchr/testify/require"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/test/sim"
)

// testLogger passes nvcdi's log to the test and keeps its warnings.
type testLogger struct {
	t        *testing.T
	mu       sync.Mutex
	warnings []string
}

func (l *testLogger) log(level, format string, args ...any) {
	l.t.Helper()
	l.t.Logf("nvcdi %s: %s", level, fmt.Sprintf(format, args...))
}
func (l *testLogger) Debugf(f string, a ...any) {}
func (l *testLogger) Tracef(f string, a ...any) {}
func (l *testLogger) Infof(f string, a ...any)  { l.log("info", f, a...) }
func (l *testLogger) Errorf(f string, a ...any) { l.log("error", f, a...) }
func (l *testLogger) Warningf(f string, a ...any) {
	l.log("warning", f, a...)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.warnings = append(l.warnings, fmt.Sprintf(f, a...))
}

// requireUnderRoot checks that every host path of edits exists in root.
func requireUnderRoot(t *testing.T, root string, e *cdispec.ContainerEdits) {
	t.Helper()
	check := func(kind, path string) {
		t.Helper()
		require.True(t, strings.HasPrefix(path, root+"/"), "%s %s is outside the root %s", kind, path, root)
		_, err := os.Lstat(path)
		require.NoError(t, err, "%s %s", kind, path)
	}
	for _, d := range e.DeviceNodes {
		host := d.HostPath
		if host == "" {
			host = d.Path
		}
		check("device node", host)
	}
	for _, m := range e.Mounts {
		check("mount", m.HostPath)
	}
	for _, h := range e.Hooks {
		check("hook", h.Path)
	}
}

// TestNvcdiDiscovery runs NVIDIA's nvcdi over a generated root as the
// plugin does on a real node, with an in-process simulator for the same
// profile and node in place of the dlopened library.
func TestNvcdiDiscovery(t *testing.T) {
	requireRoot(t)
	for _, profile := range sim.Builtin() {
		t.Run(profile, func(t *testing.T) {
			opts := testInputs(t, profile)
			require.NoError(t, Generate(opts))
			root := opts.Dir
			hook := filepath.Join(root, "plugin-dir", "nvidia-cdi-hook")
			require.NoError(t, os.MkdirAll(filepath.Dir(hook), 0o755))
			require.NoError(t, os.WriteFile(hook, []byte("#!/bin/sh\n"), 0o755))
			srv, gpus := simulated(t, profile, nil)
			version, _ := srv.SystemGetDriverVersion()
			logger := &testLogger{t: t}
			lib, err := nvcdi.New(
				nvcdi.WithNvmlLib(srv),
				nvcdi.WithMode(nvcdi.ModeNvml),
				nvcdi.WithDriverRoot(root),
				nvcdi.WithDevRoot(root),
				// The plugin names its installed copy; any path under the root will do here.
				nvcdi.WithNVIDIACDIHookPath(hook),
				nvcdi.WithLogger(logger),
				// Hermetic: never the host's libnvidia-sandboxutils.
				nvcdi.WithFeatureFlags(nvcdi.FeatureDisableNvsandboxUtils),
			)
			require.NoError(t, err)

			common, err := lib.GetCommonEdits()
			require.NoError(t, err)
			e := common.ContainerEdits
			requireUnderRoot(t, root, e)

			var devices, mounts, links []string
			for _, d := range e.DeviceNodes {
				devices = append(devices, d.Path)
				require.NotEqual(t, int64(195), d.Major, "never a real GPU's major")
			}
			for _, m := range e.Mounts {
				mounts = append(mounts, m.ContainerPath)
			}
			for _, h := range e.Hooks {
				if slices.Contains(h.Args, "create-symlinks") {
					links = append(links, h.Args...)
				}
			}
			require.ElementsMatch(t, []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"}, devices)
			want := []string{"/" + LibDir + "/libnvidia-ml.so." + version}
			for _, l := range StubLibraries {
				want = append(want, "/"+LibDir+"/"+l.Base+".so."+version)
			}
			for _, fw := range FirmwareFiles {
				want = append(want, "/lib/firmware/nvidia/"+version+"/"+fw)
			}
			for name := range Tools {
				want = append(want, "/"+BinDir+"/"+name)
			}
			for _, name := range StubBinaries {
				want = append(want, "/"+BinDir+"/"+name)
			}
			require.ElementsMatch(t, want, mounts, "nvcdi mounts every driver file of the root, and only those")
			// The stubs' SONAMEs reach the container as links.
			require.Contains(t, links, "--link")
			require.Contains(t, strings.Join(links, " "), "libcuda.so."+version+"::/"+LibDir+"/libcuda.so.1")
			require.Contains(t, strings.Join(links, " "), "libnvidia-nvvm.so."+version+"::/"+LibDir+"/libnvidia-nvvm.so.4")
			require.Contains(t, e.Env, "NVIDIA_CTK_LIBCUDA_DIR=/"+LibDir)
			for _, w := range logger.warnings {
				require.NotContains(t, w, "soname", "every library is an ELF object with a SONAME")
			}

			for _, g := range gpus {
				specs, err := lib.GetDeviceSpecsByID(g.uuid)
				require.NoError(t, err, g.uuid)
				require.Len(t, specs, 1)
				de := specs[0].ContainerEdits
				requireUnderRoot(t, root, &de)
				require.Len(t, de.DeviceNodes, 1)
				n := de.DeviceNodes[0]
				require.Equal(t, fmt.Sprintf("/dev/nvidia%d", g.minor), n.Path)
				require.Equal(t, int64(FrontendMajor), n.Major)
				require.Equal(t, int64(g.minor), n.Minor)
			}
		})
	}
}
