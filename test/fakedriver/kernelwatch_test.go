package fakedriver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/vfio"
)

// logLines collects a logger's lines for the test to search.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) add(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, prefix+" "+args)
}

func (l *logLines) contains(s ...string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		all := true
		for _, want := range s {
			all = all && strings.Contains(line, want)
		}
		if all {
			return true
		}
	}
	return false
}

// TestKernelWatcher writes through vfio.HostSysfs, as the plugin does on the
// local cluster, to a PassthroughTree that a KernelWatcher watches, and
// checks that the kernel's effect follows each write: the production moves
// (which wait for the driver link), single writes, and a write the kernel
// would refuse (logged, nothing changed).
func TestKernelWatcher(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("creating device nodes needs root")
	}
	root := t.TempDir()
	addrs := []string{"0000:1b:00.0", "0000:2c:00.0"}
	require.NoError(t, PassthroughTree(root, addrs))
	logs := &logLines{}
	ctx := klog.NewContext(context.Background(), funcr.New(logs.add, funcr.Options{Verbosity: 2}))
	w, err := WatchKernel(ctx, &Kernel{Root: root})
	require.NoError(t, err)
	sys := vfio.HostSysfs{Root: filepath.Join(root, "sys")}
	a := addrs[0]
	file := func(rel string) string {
		b, err := os.ReadFile(filepath.Join(root, "sys/bus/pci", rel))
		require.NoError(t, err)
		return string(b)
	}

	for _, tc := range []struct {
		name         string
		write        func() error
		wantDriver   string
		wantOverride string // the file's content
		wantLog      []string
	}{
		{name: "ToVFIO", write: func() error { return vfio.ToVFIO(ctx, sys, a, nil) },
			wantDriver: vfio.DriverVFIO, wantOverride: "vfio-pci\n"},
		{name: "ToNVIDIA", write: func() error { return vfio.ToNVIDIA(ctx, sys, a) },
			wantDriver: vfio.DriverNVIDIA, wantOverride: "(null)\n"},
		{name: "override set", write: func() error { return sys.SetOverride(a, vfio.DriverVFIO) },
			wantDriver: vfio.DriverNVIDIA, wantOverride: "vfio-pci\n"},
		{name: "unbind", write: func() error { return sys.Unbind(a, vfio.DriverNVIDIA) },
			wantOverride: "vfio-pci\n"},
		{name: "bind to vfio-pci", write: func() error { return sys.Bind(a, vfio.DriverVFIO) },
			wantDriver: vfio.DriverVFIO, wantOverride: "vfio-pci\n"},
		{name: "override cleared shows (null)", write: func() error { return sys.SetOverride(a, "") },
			wantDriver: vfio.DriverVFIO, wantOverride: "(null)\n"},
		{name: "bind while bound is refused and logged", write: func() error { return sys.Bind(a, vfio.DriverNVIDIA) },
			wantDriver: vfio.DriverVFIO, wantOverride: "(null)\n", wantLog: []string{"write ignored", "device or resource busy"}},
		{name: "unknown address is ignored and logged", write: func() error { return sys.Bind("0000:ff:00.0", vfio.DriverNVIDIA) },
			wantDriver: vfio.DriverVFIO, wantOverride: "(null)\n", wantLog: []string{"write ignored", "0000:ff:00.0"}},
		{name: "back to nvidia", write: func() error {
			if err := sys.Unbind(a, vfio.DriverVFIO); err != nil {
				return err
			}
			return sys.Bind(a, vfio.DriverNVIDIA)
		}, wantDriver: vfio.DriverNVIDIA, wantOverride: "(null)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, tc.write())
			require.Eventually(t, func() bool {
				d, err := sys.Driver(a)
				return err == nil && d == tc.wantDriver && file("devices/"+a+"/driver_override") == tc.wantOverride &&
					file("drivers/nvidia/bind")+file("drivers/nvidia/unbind")+
						file("drivers/vfio-pci/bind")+file("drivers/vfio-pci/unbind") == "" &&
					(tc.wantLog == nil || logs.contains(tc.wantLog...))
			}, 5*time.Second, 10*time.Millisecond, "driver, driver_override, empty bind/unbind, log %v", tc.wantLog)
			other, err := sys.Driver(addrs[1])
			require.NoError(t, err)
			require.Equal(t, vfio.DriverNVIDIA, other, "the other GPU is untouched")
		})
	}

	t.Run("stops cleanly", func(t *testing.T) {
		require.NoError(t, w.Stop())
		require.True(t, logs.contains("simulated kernel stopped"))
		require.NoError(t, sys.SetOverride(a, vfio.DriverVFIO))
		require.NoError(t, sys.Unbind(a, vfio.DriverNVIDIA))
		time.Sleep(100 * time.Millisecond)
		d, err := sys.Driver(a)
		require.NoError(t, err)
		require.Equal(t, vfio.DriverNVIDIA, d, "no effect after Stop")
		require.Equal(t, a, file("drivers/nvidia/unbind"), "a plain file again")
	})
}

// TestWatchKernelStopsWithContext: the watcher also ends with its context,
// and refuses a root without passthrough files.
func TestWatchKernelStopsWithContext(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("creating device nodes needs root")
	}
	_, err := WatchKernel(context.Background(), &Kernel{Root: t.TempDir()})
	require.ErrorContains(t, err, "no PCI drivers with a bind file")

	root := t.TempDir()
	require.NoError(t, PassthroughTree(root, []string{"0000:1b:00.0"}))
	ctx, cancel := context.WithCancel(context.Background())
	w, err := WatchKernel(ctx, &Kernel{Root: root})
	require.NoError(t, err)
	cancel()
	done := make(chan error)
	go func() { done <- w.Stop() }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal(fmt.Errorf("the watcher did not stop with its context"))
	}
}
