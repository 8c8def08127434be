//go:build failpoints

package failpoint

import (
	"fmt"
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
	kind  string // crash, sleep
	arg   int
	after int // crash on this hit (crash-after)
	hits  atomic.Int64
}

var (
	once    sync.Once
	actions map[string]*action
	kill    = crash
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
		switch {
		case act == "crash":
			a.kind, a.after = "crash", 1
		case strings.HasPrefix(act, "crash-after(") && strings.HasSuffix(act, ")"):
			n, err := strconv.Atoi(act[len("crash-after(") : len(act)-1])
			if err != nil || n < 1 {
				return nil, fmt.Errorf("failpoint %q: crash-after takes a count >= 1", item)
			}
			a.kind, a.after = "crash", n
		case strings.HasPrefix(act, "sleep(") && strings.HasSuffix(act, ")"):
			ms, err := strconv.Atoi(act[len("sleep(") : len(act)-1])
			if err != nil || ms < 0 {
				return nil, fmt.Errorf("failpoint %q: sleep takes milliseconds", item)
			}
			a.kind, a.arg = "sleep", ms
		default:
			return nil, fmt.Errorf("failpoint %q: unknown action %q (crash, crash-after(n), sleep(ms))", item, act)
		}
		out[name] = a
	}
	return out, nil
}

// Inject runs the action configured for name, if any.
func Inject(name string) {
	once.Do(func() {
		var err error
		if actions, err = Parse(os.Getenv(EnvVar)); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", EnvVar, err)
			os.Exit(2)
		}
	})
	a := actions[name]
	if a == nil {
		return
	}
	switch a.kind {
	case "sleep":
		time.Sleep(time.Duration(a.arg) * time.Millisecond)
	case "crash":
		if a.hits.Add(1) == int64(a.after) {
			fmt.Fprintf(os.Stderr, "failpoint %s: crashing (SIGKILL)\n", name)
			kill()
		}
	}
}
