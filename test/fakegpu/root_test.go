package fakegpu

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/test/nvmlsim"
)

// fakeRoot makes <tmp>/usr/bin and, when withState, <tmp>/var/lib/gpudra-sim.
func fakeRoot(t *testing.T, withState bool) string {
	t.Helper()
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "usr", "bin"), 0o755))
	if withState {
		require.NoError(t, os.MkdirAll(filepath.Join(root, RootStateDir), 0o755))
	}
	return root
}

func TestRootStateDir(t *testing.T) {
	root := fakeRoot(t, true)
	bare := fakeRoot(t, false)
	tests := []struct {
		name string
		exe  string
		want string
	}{
		{"installed in a root", filepath.Join(root, "usr/bin/nvidia-smi"), filepath.Join(root, RootStateDir)},
		{"unclean path", root + "//usr/bin/./nvidia-cuda-mps-control", filepath.Join(root, RootStateDir)},
		{"root without state dir", filepath.Join(bare, "usr/bin/nvidia-smi"), ""},
		{"GKE's layout: <root>/bin", filepath.Join(root, "bin/nvidia-smi"), filepath.Join(root, RootStateDir)},
		{"not in a bin directory", filepath.Join(root, "sbin/nvidia-smi"), ""},
		{"usr/local/bin", filepath.Join(root, "usr/local/bin/nvidia-smi"), ""},
		{"build output", "/work/_output/bin/gpudra-fake-nvidia-smi", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := rootStateDir(tc.exe)
			require.Equal(t, tc.want != "", ok)
			require.Equal(t, tc.want, got)
		})
	}
}

// setExecutable makes StateDir see exe as the running executable.
func setExecutable(t *testing.T, exe string, err error) {
	t.Helper()
	old := executable
	executable = func() (string, error) { return exe, err }
	t.Cleanup(func() { executable = old })
}

func TestStateDir(t *testing.T) {
	root := fakeRoot(t, true)
	override := t.TempDir()
	tests := []struct {
		name    string
		env     string
		exe     string
		exeErr  error
		want    string
		wantErr string
	}{
		{"env wins over the root", override, filepath.Join(root, "usr/bin/nvidia-smi"), nil, override, ""},
		{"from the executable's root", "", filepath.Join(root, "usr/bin/nvidia-smi"), nil, filepath.Join(root, RootStateDir), ""},
		{"neither", "", "/opt/bin/nvidia-smi", nil, "", "is not installed as <root>/usr/bin/<tool>"},
		{"executable unknown", "", "", errors.New("no /proc"), "", "path of this executable is unknown"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(StateDirEnv, tc.env)
			setExecutable(t, tc.exe, tc.exeErr)
			got, err := StateDir()
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestMPSDirs(t *testing.T) {
	root := fakeRoot(t, true)
	state := filepath.Join(root, RootStateDir)
	tests := []struct {
		name              string
		exe, pipe, log    string
		wantPipe, wantLog string
	}{
		{"real defaults", "/opt/bin/x", "", "", "/tmp/nvidia-mps", "/var/log/nvidia-mps"},
		{"in a fake root", filepath.Join(root, "usr/bin/nvidia-cuda-mps-control"), "", "",
			filepath.Join(state, "mps/pipe"), filepath.Join(state, "mps/log")},
		{"environment wins", filepath.Join(root, "usr/bin/nvidia-cuda-mps-control"), "/p", "/l", "/p", "/l"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(StateDirEnv, "")
			t.Setenv("CUDA_MPS_PIPE_DIRECTORY", tc.pipe)
			t.Setenv("CUDA_MPS_LOG_DIRECTORY", tc.log)
			setExecutable(t, tc.exe, nil)
			pipe, log := mpsDirs()
			require.Equal(t, tc.wantPipe, pipe)
			require.Equal(t, tc.wantLog, log)
		})
	}
}

// TestInstalledNvidiaSMI builds the fake nvidia-smi, installs it as
// <R>/usr/bin/nvidia-smi and checks that, without the environment variable,
// it records the time slice under <R>/var/lib/gpudra-sim.
func TestInstalledNvidiaSMI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	root := fakeRoot(t, true)
	smi := filepath.Join(root, "usr/bin/nvidia-smi")
	out, err := exec.Command("go", "build", "-o", smi, "github.com/gpudra/gpudra/test/cmd/gpudra-fake-nvidia-smi").CombinedOutput()
	require.NoError(t, err, string(out))

	const uuid = "GPU-c430a68b-d9df-5dd3-aa1b-d89185d86591"
	cmd := exec.Command(smi, "compute-policy", "-i", uuid, "--set-timeslice=3")
	preload, err := nvmlsim.ToolEnv() // it needs libnvidia-ml, like the real tool
	require.NoError(t, err)
	cmd.Env = append(append(withoutEnv(os.Environ(), StateDirEnv), StateDirEnv+"="), preload...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Run(), stderr.String())
	b, err := os.ReadFile(TimeSlicePath(filepath.Join(root, RootStateDir), uuid))
	require.NoError(t, err)
	require.Equal(t, "3", strings.TrimSpace(string(b)))
}

func withoutEnv(env []string, name string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}
