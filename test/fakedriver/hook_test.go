package fakedriver

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/pkg/nvmllib/sim"
)

// TestHookRecordsProcess runs the fake nvidia-cdi-hook the way runc runs a
// createContainer hook (state on stdin, the bundle's config.json readable):
// the container becomes a simulated GPU process for as long as the hook's
// helper lives (in a container, until the container's PID namespace ends;
// here, until its process group is killed).
func TestHookRecordsProcess(t *testing.T) {
	for _, tool := range []string{"flock", "setsid", "sleep", "paste"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the hook needs %s: %v", tool, err)
		}
	}
	root := t.TempDir()
	hook := filepath.Join(root, BinDir, HookBinary)
	require.NoError(t, os.MkdirAll(filepath.Dir(hook), 0o755))
	require.NoError(t, os.WriteFile(hook, []byte(hookScript), 0o755))
	bundle := filepath.Join(t.TempDir(), "bundle")
	require.NoError(t, os.MkdirAll(bundle, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(bundle, "config.json"), []byte(`{"process":{"env":["PATH=/bin",
		"NVIDIA_VISIBLE_DEVICES=GPU-abc","GPUDRA_GPU_3=GPU-abc","GPUDRA_MIG_4_2_0=MIG-def"]}}`), 0o644))
	run := func(id, bundle string) {
		t.Helper()
		cmd := exec.Command(hook, "create-symlinks", "--link", "x::y")
		cmd.Stdin = strings.NewReader(`{"ociVersion":"1.2.0","id":"` + id + `","status":"creating","pid":4242,"bundle":"` + bundle +
			`","annotations":{"io.kubernetes.cri.sandbox-id":"s1"}}`)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		require.NoError(t, cmd.Run(), out.String())
		assert.Less(t, time.Since(start), 5*time.Second, "the hook does not wait for its helper")
	}
	dir := filepath.Join(root, ProcessDir)
	procs := func() map[string]sim.Process {
		p, err := sim.ReadProcesses(dir)
		require.NoError(t, err)
		return p
	}

	run("c0ffee", bundle)
	run("c0ffee", bundle) // the spec's next hook
	require.Eventually(t, func() bool { return len(procs()) == 1 }, 5*time.Second, 20*time.Millisecond)
	assert.Equal(t, sim.Process{Name: "c0ffee", Devices: []string{"GPU-abc", "MIG-def"}}, procs()["c0ffee"])
	helpers := helperGroups(t, filepath.Join(dir, "c0ffee.lock"))
	require.Len(t, helpers, 1, "one helper however many hooks ran")

	noGPU := filepath.Join(t.TempDir(), "bundle")
	require.NoError(t, os.MkdirAll(noGPU, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(noGPU, "config.json"), []byte(`{"process":{"env":["PATH=/bin"]}}`), 0o644))
	run("plain", noGPU)
	run("broken", filepath.Join(t.TempDir(), "missing"))

	require.NoError(t, syscall.Kill(-helpers[0], syscall.SIGKILL)) // the container ends
	require.Eventually(t, func() bool { return len(procs()) == 0 }, 5*time.Second, 20*time.Millisecond,
		"a record whose helper is gone is dead")
	assert.NoFileExists(t, filepath.Join(dir, "c0ffee.json"))
}

// helperGroups returns the process groups of the flock processes holding
// lock.
func helperGroups(t *testing.T, lock string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.HasPrefix(string(cmdline), "flock\x00") || !bytes.Contains(cmdline, []byte(lock)) {
			continue
		}
		pgid, err := syscall.Getpgid(pid)
		require.NoError(t, err)
		out = append(out, pgid)
	}
	t.Cleanup(func() {
		for _, g := range out {
			_ = syscall.Kill(-g, syscall.SIGKILL)
		}
	})
	return out
}
