package fakedriver

import (
	"bytes"
	"fmt"
	"io"
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

	"github.com/gpudra/gpudra/test/sim"
)

// TestHookRecordsProcess runs the fake nvidia-cdi-hook the way runc runs a
// createContainer hook: in the runtime's namespaces, with the state on stdin
// naming the container's init (here a process alone in a new PID namespace)
// and the bundle's config.json readable. The container is a simulated GPU
// process while its PID namespace lives, and no longer once its init exits.
func TestHookRecordsProcess(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the container stands in as a process in a new PID namespace")
	}
	for _, tool := range []string{"flock", "setsid", "sleep", "paste", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the hook needs %s: %v", tool, err)
		}
	}
	root := t.TempDir()
	hook := filepath.Join(root, RecordHook)
	require.NoError(t, os.MkdirAll(filepath.Dir(hook), 0o755))
	require.NoError(t, os.WriteFile(hook, []byte(hookScript), 0o755))
	bundle := filepath.Join(t.TempDir(), "bundle")
	require.NoError(t, os.MkdirAll(bundle, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(bundle, "config.json"), []byte(`{"process":{"env":["PATH=/bin",
		"NVIDIA_VISIBLE_DEVICES=GPU-abc","GPUDRA_GPU_3=GPU-abc","GPUDRA_MIG_4_2_0=MIG-def"]}}`), 0o644))

	// The container's init: PID 1 of a PID namespace of its own.
	init := exec.Command("sleep", "600")
	init.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	require.NoError(t, init.Start())
	initExited := make(chan struct{})
	go func() { _ = init.Wait(); close(initExited) }()
	t.Cleanup(func() { _ = init.Process.Kill(); <-initExited })

	run := func(id string, pid int, bundle string) {
		t.Helper()
		cmd := exec.Command(hook, "create-symlinks", "--link", "x::y")
		cmd.Env = []string{} // runc starts a hook with the spec's env only: none
		cmd.Stdin = strings.NewReader(`{"ociVersion":"1.2.0","id":"` + id + `","status":"creating","pid":` + strconv.Itoa(pid) +
			`,"bundle":"` + bundle + `","annotations":{"io.kubernetes.cri.sandbox-id":"s1"}}`)
		var out bytes.Buffer
		// A buffer, as runc gives: Run returns only at EOF of the hook's
		// output, so a helper holding it would hang the container's start.
		cmd.Stdout, cmd.Stderr = &out, &out
		// runc's init hands its hooks descriptors of its own, among them
		// the exec FIFO that the container's start waits on: the helper
		// must keep none of them.
		fifo, fifoW, err := os.Pipe()
		require.NoError(t, err)
		defer func() { _ = fifo.Close() }()
		cmd.ExtraFiles = []*os.File{fifoW}
		start := time.Now()
		require.NoError(t, cmd.Run(), out.String())
		assert.Less(t, time.Since(start), 5*time.Second, "the hook does not wait for its helper")
		require.NoError(t, fifoW.Close())
		require.NoError(t, fifo.SetReadDeadline(time.Now().Add(5*time.Second)))
		_, err = fifo.Read(make([]byte, 1))
		require.ErrorIs(t, err, io.EOF, "a process started by the hook keeps the runtime's descriptor open")
	}
	dir := filepath.Join(root, ProcessDir)
	procs := func() map[string]sim.Process {
		p, err := sim.ReadProcesses(dir)
		require.NoError(t, err)
		return p
	}

	run("c0ffee", init.Process.Pid, bundle)
	run("c0ffee", init.Process.Pid, bundle) // the spec's next hook
	require.Eventually(t, func() bool { return len(procs()) == 1 }, 5*time.Second, 20*time.Millisecond)
	assert.Equal(t, sim.Process{Name: "c0ffee", Devices: []string{"GPU-abc", "MIG-def"}}, procs()["c0ffee"])
	// The holders: the helper (a sleep in the container's PID namespace)
	// and, from the runtime's namespaces, the nsenter that waits for it.
	initNS, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", init.Process.Pid))
	require.NoError(t, err)
	var inContainer int
	for _, h := range lockHolders(t, filepath.Join(dir, "c0ffee.lock")) {
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", h)); err == nil && ns == initNS {
			inContainer++
		}
	}
	assert.Equal(t, 1, inContainer, "one helper in the container's PID namespace however many hooks ran")

	noGPU := filepath.Join(t.TempDir(), "bundle")
	require.NoError(t, os.MkdirAll(noGPU, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(noGPU, "config.json"), []byte(`{"process":{"env":["PATH=/bin"]}}`), 0o644))
	run("plain", init.Process.Pid, noGPU)
	run("broken", init.Process.Pid, filepath.Join(t.TempDir(), "missing"))
	run("nopid", 0, bundle) // no container to tie a record to: none
	assert.Len(t, procs(), 1)

	require.NoError(t, init.Process.Kill()) // the container ends
	<-initExited
	require.Eventually(t, func() bool { return len(procs()) == 0 }, 5*time.Second, 20*time.Millisecond,
		"a record whose container is gone is dead")
	assert.NoFileExists(t, filepath.Join(dir, "c0ffee.json"))

	// runc runs createContainer hooks from its init, inside the container's
	// PID namespace, where the state's pid is 1: the helper starts there
	// and dies with the namespace's init. Here the init is a shell that runs
	// the hook, then waits.
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skipf("the in-namespace case needs unshare: %v", err)
	}
	state := `{"ociVersion":"1.0.2-dev","id":"inside","status":"creating","pid":1,"bundle":"` + bundle + `"}`
	inside := exec.Command("unshare", "--pid", "--fork", "--kill-child", "sh", "-c", `printf '%s' "$1" | "$2" >/dev/null 2>&1; exec sleep 600`, "init", state, hook)
	inside.Env = []string{}
	require.NoError(t, inside.Start())
	insideExited := make(chan struct{})
	go func() { _ = inside.Wait(); close(insideExited) }()
	t.Cleanup(func() { _ = inside.Process.Kill(); <-insideExited })
	require.Eventually(t, func() bool { return len(procs()) == 1 }, 5*time.Second, 20*time.Millisecond,
		"a hook run inside the container's PID namespace records it")
	assert.Equal(t, sim.Process{Name: "inside", Devices: []string{"GPU-abc", "MIG-def"}}, procs()["inside"])
	require.NoError(t, inside.Process.Kill()) // --kill-child: the namespace's init dies with unshare
	<-insideExited
	require.Eventually(t, func() bool { return len(procs()) == 0 }, 5*time.Second, 20*time.Millisecond,
		"the record dies with the namespace")
}

// lockHolders returns the PIDs of the processes that have lock open (the
// helpers holding it).
func lockHolders(t *testing.T, lock string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		fds, _ := os.ReadDir(filepath.Join("/proc", e.Name(), "fd"))
		for _, fd := range fds {
			if target, err := os.Readlink(filepath.Join("/proc", e.Name(), "fd", fd.Name())); err == nil && target == lock {
				out = append(out, pid)
				break
			}
		}
	}
	t.Cleanup(func() {
		for _, p := range out { // setsid made each the leader of its group
			_ = syscall.Kill(-p, syscall.SIGKILL)
		}
	})
	return out
}
