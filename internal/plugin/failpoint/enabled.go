//go:build failpoints

package failpoint

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Enabled reports whether this binary was built with failpoints.
const Enabled = true

type action struct {
	kind  string // crash, sleep, sleep-crash
	arg   int    // milliseconds (sleep, sleep-crash)
	after int    // crash on this hit (crash, crash-after, sleep-crash)
	hits  atomic.Int64
}

var (
	once    sync.Once
	actions map[string]*action
	kill    = crash

	// The failpoints armed through FileEnvVar: read again on every Inject,
	// parsed again (hit counts from zero) whenever the file's content changes.
	fileMu      sync.Mutex
	fileSpec    []byte
	fileActions map[string]*action
)

// crash ends the process at once, as kill -9 would. A process that is PID 1
// of its PID namespace (a container's first process, the local cluster's
// plugins) ignores signals it sends itself, SIGKILL included: it exits
// without running any deferred code instead, which leaves the same state.
func crash() {
	if os.Getpid() == 1 {
		syscall.Exit(137)
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
}

// Parse reads a failpoint specification (see the package documentation).
func Parse(spec string) (map[string]*action, error) {
	out := map[string]*action{}
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, act, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("failpoint %q: want <name>=<action>", item)
		}
		a := &action{}
		arg := func(prefix string) (int, bool) {
			if !strings.HasPrefix(act, prefix+"(") || !strings.HasSuffix(act, ")") {
				return 0, false
			}
			n, err := strconv.Atoi(act[len(prefix)+1 : len(act)-1])
			if err != nil {
				return -1, true
			}
			return n, true
		}
		switch {
		case act == "crash":
			a.kind, a.after = "crash", 1
		case strings.HasPrefix(act, "crash-after("):
			n, _ := arg("crash-after")
			if n < 1 {
				return nil, fmt.Errorf("failpoint %q: crash-after takes a count >= 1", item)
			}
			a.kind, a.after = "crash", n
		case strings.HasPrefix(act, "sleep-crash("):
			ms, _ := arg("sleep-crash")
			if ms < 0 {
				return nil, fmt.Errorf("failpoint %q: sleep-crash takes milliseconds", item)
			}
			a.kind, a.arg, a.after = "sleep-crash", ms, 1
		case strings.HasPrefix(act, "sleep("):
			ms, _ := arg("sleep")
			if ms < 0 {
				return nil, fmt.Errorf("failpoint %q: sleep takes milliseconds", item)
			}
			a.kind, a.arg = "sleep", ms
		default:
			return nil, fmt.Errorf("failpoint %q: unknown action %q (crash, crash-after(n), sleep(ms), sleep-crash(ms))", item, act)
		}
		out[name] = a
	}
	return out, nil
}

// fromFile returns the action the file named by FileEnvVar arms for name,
// if any, and the file's path.
func fromFile(name string) (*action, string) {
	path := os.Getenv(FileEnvVar)
	if path == "" {
		return nil, ""
	}
	spec, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		spec, err = nil, nil
	}
	fileMu.Lock()
	defer fileMu.Unlock()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v; its failpoints are off\n", FileEnvVar, err)
		spec = nil
	}
	if !bytes.Equal(spec, fileSpec) {
		fileSpec = spec
		if fileActions, err = Parse(string(spec)); err != nil {
			fmt.Fprintf(os.Stderr, "%s %s: %v; its failpoints are off\n", FileEnvVar, path, err)
			fileActions = map[string]*action{}
		}
	}
	return fileActions[name], path
}

// Inject runs the action configured for name, if any: one armed in the
// file named by FileEnvVar, else one in EnvVar.
func Inject(name string) {
	once.Do(func() {
		var err error
		if actions, err = Parse(os.Getenv(EnvVar)); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", EnvVar, err)
			os.Exit(2)
		}
	})
	a, file := fromFile(name)
	if a == nil {
		a, file = actions[name], ""
	}
	if a == nil {
		return
	}
	switch a.kind {
	case "sleep":
		time.Sleep(time.Duration(a.arg) * time.Millisecond)
	case "crash", "sleep-crash":
		if a.hits.Add(1) != int64(a.after) {
			return
		}
		if a.kind == "sleep-crash" {
			fmt.Fprintf(os.Stderr, "failpoint %s: sleeping %d ms, then crashing\n", name, a.arg)
			time.Sleep(time.Duration(a.arg) * time.Millisecond)
		}
		if file != "" {
			// Fires once: the process the kubelet starts again comes up
			// without it.
			if err := os.Remove(file); err != nil && !errors.Is(err, fs.ErrNotExist) {
				fmt.Fprintf(os.Stderr, "failpoint %s: disarm %s: %v\n", name, file, err)
			}
		}
		fmt.Fprintf(os.Stderr, "failpoint %s: crashing (SIGKILL)\n", name)
		kill()
	}
}
