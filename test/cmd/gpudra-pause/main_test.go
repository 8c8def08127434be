package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// childEnv makes the test binary run the program instead of the tests: main's
// two steps, with a line on stdout between them once the handlers are in
// place, so that TestSignals signals no earlier (a fixed 200 ms sleep was
// too short for a race-enabled binary starting on a loaded machine: the
// signal's default action killed it).
const childEnv = "GPUDRA_PAUSE_TEST_MAIN"

const readyLine = "handlers installed"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		sigs := notify()
		fmt.Println(readyLine)
		os.Exit(run(sigs, reap))
	}
	os.Exit(m.Run())
}

func TestRun(t *testing.T) {
	sigs := make(chan os.Signal, 4)
	reaped := 0
	sigs <- syscall.SIGCHLD
	sigs <- syscall.SIGHUP // ignored
	sigs <- syscall.SIGCHLD
	sigs <- syscall.SIGTERM
	assert.Equal(t, 0, run(sigs, func() []int { reaped++; return nil }))
	assert.Equal(t, 3, reaped, "once at start and once per SIGCHLD")
}

func TestReap(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "exit 3")
	require.NoError(t, cmd.Start())
	deadline := time.Now().Add(10 * time.Second)
	var got []int
	for len(got) == 0 && time.Now().Before(deadline) {
		got = reap()
		time.Sleep(10 * time.Millisecond)
	}
	assert.Equal(t, []int{cmd.Process.Pid}, got)
	assert.Empty(t, reap(), "nothing left to reap")
}

// TestSignals runs the real program and stops it with each signal.
func TestSignals(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), childEnv+"=1")
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		line, err := bufio.NewReader(stdout).ReadString('\n')
		require.NoError(t, err, "%v: it exited before installing its handlers", sig)
		require.Equal(t, readyLine+"\n", line)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		require.NoError(t, cmd.Process.Signal(sig))
		select {
		case err := <-done:
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				t.Fatalf("%v: exit status %d, want 0", sig, exit.ExitCode())
			}
			require.NoError(t, err, sig)
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("%v: still running 10s after the signal", sig)
		}
	}
}
