package imexdaemon

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpudra/gpudra/internal/shared/imex"
)

func TestFromEnvAndValidate(t *testing.T) {
	env := map[string]string{imex.DomainUIDEnv: "uid-1", imex.NodesConfigEnv: "/imex/nodes", imex.DriverRootEnv: "/driver-root"}
	o := FromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.Equal(t, Options{DomainUID: "uid-1", NodesConfig: "/imex/nodes", DriverRoot: "/driver-root"}, o)

	root := t.TempDir()
	tests := []struct {
		name    string
		o       Options
		run     bool
		wantErr []string
	}{
		{"run", Options{DomainUID: "u", NodesConfig: "/n", DriverRoot: root}, true, nil},
		{"check needs no node list", Options{DomainUID: "u"}, false, nil},
		{"no UID", Options{NodesConfig: "/n"}, true, []string{"$COMPUTE_DOMAIN_UID must be"}},
		{"UID with a slash", Options{DomainUID: "../x", NodesConfig: "/n"}, true, []string{"$COMPUTE_DOMAIN_UID must be"}},
		{"no node list", Options{DomainUID: "u"}, true, []string{"$GPUDRA_IMEX_NODES_CONFIG must be the absolute path", "CDI"}},
		{"relative node list", Options{DomainUID: "u", NodesConfig: "n"}, true, []string{"$GPUDRA_IMEX_NODES_CONFIG"}},
		{"no driver root", Options{DomainUID: "u", NodesConfig: "/n", DriverRoot: filepath.Join(root, "none")}, true, []string{"$GPUDRA_DRIVER_ROOT=", "not a directory"}},
		{"all wrong", Options{DriverRoot: filepath.Join(root, "none")}, true, []string{"$COMPUTE_DOMAIN_UID", "$GPUDRA_IMEX_NODES_CONFIG", "$GPUDRA_DRIVER_ROOT"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.Validate(tc.run)
			if tc.wantErr == nil {
				require.NoError(t, err)
				return
			}
			for _, w := range tc.wantErr {
				require.ErrorContains(t, err, w)
			}
		})
	}
}

func TestTool(t *testing.T) {
	tests := []struct {
		name, dir, want, wantErr string
	}{
		{"host layout", "usr/bin", "/usr/bin/nvidia-imex", ""},
		{"GKE layout", "bin", "/bin/nvidia-imex", ""},
		{"missing", "", "", "install NVIDIA's IMEX package"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.dir != "" {
				require.NoError(t, os.MkdirAll(filepath.Join(root, tc.dir), 0o755))
				require.NoError(t, os.WriteFile(filepath.Join(root, tc.dir, imex.DaemonBinary), nil, 0o755))
			}
			got, err := (&Options{DriverRoot: root}).tool(imex.DaemonBinary)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// TestRun: the configuration and the node list are written before
// nvidia-imex starts with -c; a changed node list restarts it (SIGTERM to
// the old one); the end of the context stops it and Run returns nil.
func TestRun(t *testing.T) {
	o, bin := testOptions(t)
	starts := filepath.Join(t.TempDir(), "starts")
	script(t, bin, imex.DaemonBinary, `echo "start $$ $*" >> `+starts+`
trap 'echo "term $$" >> `+starts+`; exit 0' TERM
while :; do sleep 0.02; done
`)
	require.NoError(t, os.WriteFile(o.NodesConfig, []byte("10.0.0.1\n\n 10.0.0.2 \n"), 0o644))
	stop, _ := runAsync(t, o)
	work := filepath.Join(o.TmpDir, imex.WorkDirBase, o.DomainUID)
	config := filepath.Join(work, imex.ConfigFile)
	require.Eventually(t, func() bool { return len(lines(t, starts)) >= 4 }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, []string{"-c", config}, lines(t, starts)[2:4])

	data, err := os.ReadFile(config)
	require.NoError(t, err)
	for _, want := range []string{"DAEMONIZE=0", "LOG_FILE_NAME=", "SERVER_PORT=50000", "IMEX_NODE_CONFIG_FILE=" + filepath.Join(work, imex.NodesFile),
		"IMEX_CMD_ENABLED=1", "IMEX_CMD_BIND_INTERFACE_IP=127.0.0.1", "IMEX_CMD_PORT=50005", "IMEX_ENABLE_AUTH_ENCRYPTION=0"} {
		require.Contains(t, strings.Split(string(data), "\n"), want)
	}
	require.Equal(t, []string{"10.0.0.1", "10.0.0.2"}, lines(t, filepath.Join(work, imex.NodesFile)))

	// The same addresses, written again: no restart.
	require.NoError(t, os.WriteFile(o.NodesConfig, []byte("10.0.0.1\n10.0.0.2\n"), 0o644))
	time.Sleep(10 * o.Poll)
	require.Len(t, lines(t, starts), 4)

	require.NoError(t, os.WriteFile(o.NodesConfig, []byte("10.0.0.1\n10.0.0.2\n10.0.0.3\n"), 0o644))
	require.Eventually(t, func() bool { return len(lines(t, starts)) == 10 }, 10*time.Second, 10*time.Millisecond, "term, then a second start")
	l := lines(t, starts)
	require.Equal(t, []string{"term", l[1]}, l[4:6], "the first one got SIGTERM before the second started")
	require.Equal(t, "start", l[6])
	require.Equal(t, []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}, lines(t, filepath.Join(work, imex.NodesFile)))

	require.NoError(t, stop())
	require.Equal(t, []string{"term", l[7]}, lines(t, starts)[10:12])
	require.NoDirExists(t, work, "a daemon that stops leaves no directory in the driver root's tmp")
}

func TestRunGivesUp(t *testing.T) {
	tests := []struct {
		name, body, wantErr string
	}{
		{"exits with an error", "echo 'port in use' >&2; exit 3", "exit status 3"},
		{"exits with 0", "exit 0", "status 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, bin := testOptions(t)
			o.MaxRestarts = 3
			count := filepath.Join(t.TempDir(), "count")
			script(t, bin, imex.DaemonBinary, "echo x >> "+count+"\n"+tc.body+"\n")
			require.NoError(t, os.WriteFile(o.NodesConfig, []byte("10.0.0.1\n"), 0o644))
			_, ctx := ktesting.NewTestContext(t)
			err := Run(ctx, o)
			require.ErrorIs(t, err, ErrKeepsDying)
			require.ErrorContains(t, err, "exited 3 times in a row")
			require.ErrorContains(t, err, tc.wantErr)
			require.Len(t, lines(t, count), 3)
		})
	}
}

func TestRunErrors(t *testing.T) {
	o, _ := testOptions(t)
	_, ctx := ktesting.NewTestContext(t)
	require.ErrorContains(t, Run(ctx, o), "nvidia-imex not found on $PATH")

	o.DomainUID = ""
	require.ErrorContains(t, Run(ctx, o), "$COMPUTE_DOMAIN_UID")

	// A driver root without the IMEX package.
	o, _ = testOptions(t)
	o.DriverRoot = t.TempDir()
	require.ErrorContains(t, Run(ctx, o), "not found in the driver root")
}

// TestRunStopsOnCancelDuringBackoff: a context that ends while a dead
// child waits for its restart ends Run without an error.
func TestRunStopsOnCancelDuringBackoff(t *testing.T) {
	o, bin := testOptions(t)
	o.Backoff = time.Hour
	script(t, bin, imex.DaemonBinary, "exit 1\n")
	require.NoError(t, os.WriteFile(o.NodesConfig, []byte("10.0.0.1\n"), 0o644))
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	require.NoError(t, Run(ctx, o))
}

// TestDefaults: the timings docs/computedomains.md states.
func TestDefaults(t *testing.T) {
	var o Options
	o.defaults()
	require.Equal(t, Options{TmpDir: "/", Poll: time.Second, MaxRestarts: 5, StableAfter: time.Minute, Backoff: time.Second,
		StopTimeout: 10 * time.Second, CheckTimeout: 5 * time.Second, ServerPort: 50000, CmdPort: 50005}, o)
}

// TestRunWaitsForNodes: nvidia-imex starts only once the node list names
// an address, and stops while the list is empty.
func TestRunWaitsForNodes(t *testing.T) {
	o, bin := testOptions(t)
	starts := filepath.Join(t.TempDir(), "starts")
	script(t, bin, imex.DaemonBinary, `echo "start $$" >> `+starts+`
trap 'echo "term $$" >> `+starts+`; exit 0' TERM
while :; do sleep 0.02; done
`)
	stop, _ := runAsync(t, o)
	time.Sleep(10 * o.Poll)
	require.Empty(t, lines(t, starts), "no file yet")
	require.NoError(t, os.WriteFile(o.NodesConfig, []byte("\n"), 0o644))
	time.Sleep(10 * o.Poll)
	require.Empty(t, lines(t, starts), "an empty list")

	require.NoError(t, os.WriteFile(o.NodesConfig, []byte("10.0.0.1\n"), 0o644))
	require.Eventually(t, func() bool { return len(lines(t, starts)) == 2 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, os.WriteFile(o.NodesConfig, nil, 0o644))
	require.Eventually(t, func() bool { return len(lines(t, starts)) == 4 }, 10*time.Second, 10*time.Millisecond)
	time.Sleep(10 * o.Poll)
	l := lines(t, starts)
	require.Equal(t, []string{"start", l[1], "term", l[1]}, l, "stopped, not started again")
	require.NoError(t, stop())
}
