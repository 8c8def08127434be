package images

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGpudraImageName(t *testing.T) {
	name, err := GpudraImageName(filepath.Join(repoRoot, DefaultChartDir))
	require.NoError(t, err)
	assert.Equal(t, "ghcr.io/gpudra/gpudra:dev", name, "the chart's values.yaml repository and values-simulated.yaml tag")

	for tcName, tc := range map[string]struct {
		values, simulated string
		want, wantErr     string
	}{
		"tag from simulated":       {"image:\n  repository: r.io/a/b\n  tag: \"\"\n", "image:\n  tag: dev\n", "r.io/a/b:dev", ""},
		"simulated overrides repo": {"image:\n  repository: r.io/a/b\n", "image:\n  repository: r.io/c\n  tag: t\n", "r.io/c:t", ""},
		"tag only in values.yaml":  {"image:\n  repository: r.io/a/b\n  tag: v1\n", "nvidiaDriverRoot: /x\n", "r.io/a/b:v1", ""},
		"no tag":                   {"image:\n  repository: r.io/a/b\n", "image:\n  pullPolicy: Never\n", "", "no image.tag"},
		"broken yaml":              {"image: [\n", "", "", "values.yaml"},
		"no values-simulated.yaml": {"image:\n  repository: r.io/a/b\n", "-", "", "values-simulated.yaml"},
	} {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "values.yaml"), []byte(tc.values), 0o644))
		if tc.simulated != "-" {
			require.NoError(t, os.WriteFile(filepath.Join(dir, SimulatedValues), []byte(tc.simulated), 0o644))
		}
		got, err := GpudraImageName(dir)
		if tc.wantErr != "" {
			if assert.Error(t, err, tcName) {
				assert.Contains(t, err.Error(), tc.wantErr, tcName)
			}
			continue
		}
		require.NoError(t, err, tcName)
		assert.Equal(t, tc.want, got, tcName)
	}
}

// testBins builds, once per test run, what Sources.BinDir holds: the real
// gpudra-pause and gpudra-gpus, and small cgo programs standing in for the
// gpudra binaries (built like the Dockerfile builds them; the real ones
// take minutes), plus "unstripped", a cgo program built without -s -w, and
// "failpoints", one built like the others with the failpoints tag.
var testBins = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "gpudra-images-test-")
	if err != nil {
		return "", err
	}
	testBinsDir = dir
	goBuild := func(srcDir string, env []string, args ...string) error {
		cmd := exec.Command("go", append([]string{"build"}, args...)...)
		cmd.Dir, cmd.Env = srcDir, append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return &buildError{args: args, out: string(out), err: err}
		}
		return nil
	}
	if err := goBuild(repoRoot, []string{"CGO_ENABLED=0"}, "-o", dir+"/", "./test/cmd/"+PauseBinary, "./test/cmd/"+GPUsBinary); err != nil {
		return "", err
	}
	// The hook stands in as a static binary, as hack/build-cdi-hook.sh builds it.
	if err := goBuild(repoRoot, []string{"CGO_ENABLED=0"}, "-o", filepath.Join(dir, CDIHookBinary), "./test/cmd/"+PauseBinary); err != nil {
		return "", err
	}
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	for name, data := range map[string]string{
		"go.mod":  "module standin\n\ngo 1.22\n",
		"main.go": "package main\n\n// #include <stdio.h>\nimport \"C\"\n\nfunc main() { C.puts(C.CString(\"standin\")) }\n",
	} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(data), 0o644); err != nil {
			return "", err
		}
	}
	cgo := []string{"CGO_ENABLED=1", "GOFLAGS=-buildvcs=false"}
	for _, b := range []string{PluginBinary, ControllerBinary} {
		if err := goBuild(src, cgo, "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(dir, b), "."); err != nil {
			return "", err
		}
	}
	if err := goBuild(src, cgo, "-trimpath", "-tags", FailpointsBuildTag, "-ldflags=-s -w", "-o", filepath.Join(dir, "failpoints"), "."); err != nil {
		return "", err
	}
	return dir, goBuild(src, cgo, "-trimpath", "-o", filepath.Join(dir, "unstripped"), ".")
})

func TestMain(m *testing.M) {
	code := m.Run()
	if testBinsDir != "" {
		_ = os.RemoveAll(testBinsDir)
	}
	os.Exit(code)
}

// testBinsDir is testBins' directory once made, removed by TestMain.
var testBinsDir string

type buildError struct {
	args []string
	out  string
	err  error
}

func (e *buildError) Error() string {
	return "go build " + strings.Join(e.args, " ") + ": " + e.err.Error() + "\n" + e.out
}

func testSources(t *testing.T) Sources {
	t.Helper()
	if _, err := os.Stat("/bin/busybox"); err != nil {
		t.Skip("Debian's busybox-static is not installed (/bin/busybox): apt-get install busybox-static")
	}
	dir, err := testBins()
	require.NoError(t, err)
	return Sources{BinDir: dir, BusyboxRoot: "/", HostRoot: "/", ChartDir: filepath.Join(repoRoot, DefaultChartDir)}
}

func fileSHA(t *testing.T, p string) string {
	t.Helper()
	data, err := os.ReadFile(p)
	require.NoError(t, err)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func TestBuildAll(t *testing.T) {
	src := testSources(t)
	written, err := BuildAll(t.TempDir(), src)
	require.NoError(t, err)
	require.Len(t, written, 4)
	var names []string
	for _, w := range written {
		names = append(names, w.Name)
	}
	assert.Equal(t, []string{PauseImage, WorkloadImage, AllGPUsWorkloadImage, "ghcr.io/gpudra/gpudra:dev"}, names)

	pause, err := Read(written[0].Path)
	require.NoError(t, err)
	assert.Equal(t, []string{"/pause"}, pause.Order)
	assert.Equal(t, int64(0o755), pause.Files["/pause"].Mode)
	assert.Equal(t, fileSHA(t, filepath.Join(src.BinDir, PauseBinary)), pause.Files["/pause"].SHA256)
	assert.Equal(t, []string{"/pause"}, pause.Config.Entrypoint)

	workload, err := Read(written[1].Path)
	require.NoError(t, err)
	assert.Equal(t, fileSHA(t, "/bin/busybox"), workload.Files["/bin/busybox"].SHA256)
	assert.Equal(t, fileSHA(t, filepath.Join(src.BinDir, GPUsBinary)), workload.Files["/usr/local/bin/gpudra-gpus"].SHA256)
	for _, a := range []string{"sh", "ls", "cat", "env", "sleep", "grep", "echo", "test", "mkdir"} {
		f := workload.Files["/bin/"+a]
		assert.Equal(t, LayerFile{Path: "/bin/" + a, Type: Symlink, Mode: 0o777, Target: "busybox"}, f, a)
	}
	assert.Equal(t, int64(0o1777), workload.Files["/tmp"].Mode)
	assert.Equal(t, WorkloadCmd, workload.Config.Cmd)

	allGPUs, err := Read(written[2].Path)
	require.NoError(t, err)
	assert.Equal(t, append(slices.Clone(workload.Config.Env), WorkloadAllGPUsEnv...), allGPUs.Config.Env)
	assert.Equal(t, workload.Files, allGPUs.Files)
	assert.Equal(t, WorkloadCmd, allGPUs.Config.Cmd)

	gpudra, err := Read(written[3].Path)
	require.NoError(t, err)
	assert.Equal(t, GpudraConfig, gpudra.Config)
	for _, b := range GpudraBinaries {
		f := gpudra.Files[b]
		assert.Equal(t, int64(0o755), f.Mode, b)
		assert.Equal(t, fileSHA(t, filepath.Join(src.BinDir, filepath.Base(b))), f.SHA256, b)
	}
	hook := gpudra.Files[GpudraCDIHook]
	assert.Equal(t, int64(0o755), hook.Mode)
	assert.Equal(t, fileSHA(t, filepath.Join(src.BinDir, CDIHookBinary)), hook.SHA256)
	assert.Contains(t, string(gpudra.Files["/etc/passwd"].Data), "nonroot:x:65532:65532:")
	assert.Contains(t, string(gpudra.Files["/etc/group"].Data), "nonroot:x:65532:")
	assert.Equal(t, fileSHA(t, CACertificates), gpudra.Files[CACertificates].SHA256)
	home := gpudra.Files["/home/nonroot"]
	assert.Equal(t, [3]int64{0o700, 65532, 65532}, [3]int64{home.Mode, int64(home.UID), int64(home.GID)})
	assert.Equal(t, int64(0o1777), gpudra.Files["/tmp"].Mode)

	// The loader the binaries name and the C libraries resolve to files.
	rt, err := HostRuntime("/", []string{filepath.Join(src.BinDir, PluginBinary)}, DlopenLibraries)
	require.NoError(t, err)
	entries := map[string]Entry{}
	for p, f := range gpudra.Files {
		entries[p] = Entry{Path: p, Type: f.Type, Target: f.Target}
	}
	for _, p := range append([]string{rt.Interpreter}, values(rt.Libraries)...) {
		e, ok := resolveIn(entries, p)
		assert.True(t, ok && e.Type == File, "%s does not resolve to a file in the gpudra image", p)
	}
	assert.Contains(t, rt.Libraries, "libc.so.6")
}

func TestSpecsRefuse(t *testing.T) {
	src := testSources(t)
	dynamic := filepath.Join(src.BinDir, "unstripped")
	for name, tc := range map[string]struct {
		spec func(Sources) (Image, error)
		src  func(s Sources) Sources
		want string
	}{
		"dynamic pause": {PauseSpec, func(s Sources) Sources {
			s.BinDir = linkDir(t, map[string]string{PauseBinary: dynamic})
			return s
		}, "dynamically linked (interpreter"},
		"gpudra not stripped": {GpudraSpec, func(s Sources) Sources {
			s.BinDir = linkDir(t, map[string]string{PluginBinary: dynamic, ControllerBinary: dynamic})
			return s
		}, `built with CGO_ENABLED=1 go build -trimpath; the image needs it built as the Dockerfile does: CGO_ENABLED=1 go build -trimpath -ldflags="-s -w"`},
		"gpudra static": {GpudraSpec, func(s Sources) Sources {
			p := filepath.Join(s.BinDir, PauseBinary)
			s.BinDir = linkDir(t, map[string]string{PluginBinary: p, ControllerBinary: p})
			return s
		}, "was built with CGO_ENABLED=0"},
		"dynamic hook": {GpudraSpec, func(s Sources) Sources {
			s.BinDir = linkDir(t, map[string]string{PluginBinary: filepath.Join(s.BinDir, PluginBinary),
				ControllerBinary: filepath.Join(s.BinDir, ControllerBinary), CDIHookBinary: dynamic})
			return s
		}, "nvidia-cdi-hook runs on the host, whatever its C library"},
		"no busybox": {WorkloadSpec, func(s Sources) Sources { s.BusyboxRoot = t.TempDir(); return s }, "bin/busybox"},
		"no chart":   {GpudraSpec, func(s Sources) Sources { s.ChartDir = t.TempDir(); return s }, "read the chart's values"},
	} {
		_, err := tc.spec(tc.src(src))
		if assert.Error(t, err, name) {
			assert.Contains(t, err.Error(), tc.want, name)
		}
	}
}

// linkDir is a directory of symlinks name -> target.
func linkDir(t *testing.T, links map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, target := range links {
		require.NoError(t, os.Symlink(target, filepath.Join(dir, name)))
	}
	return dir
}

func TestCheckApplets(t *testing.T) {
	fake := filepath.Join(t.TempDir(), "busybox")
	require.NoError(t, os.WriteFile(fake, []byte("#!/bin/sh\nprintf 'sh\\nls\\ncat\\n'\n"), 0o755))
	require.NoError(t, checkApplets(fake, []string{"sh", "cat"}))
	err := checkApplets(fake, []string{"sh", "grep", "awk"})
	if assert.Error(t, err) {
		assert.Contains(t, err.Error(), "lacks the applets grep awk")
	}
	if _, err := os.Stat("/bin/busybox"); err == nil {
		require.NoError(t, checkApplets("/bin/busybox", BusyboxApplets), "Debian's busybox-static has every applet the image links")
	}
}
