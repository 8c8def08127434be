package mpspod

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpudra/gpudra/internal/plugin/sharing"
	"github.com/gpudra/gpudra/test/fakedriver"
	"github.com/gpudra/gpudra/test/fakegpu"
)

// TestRunDaemonChrooted runs the arguments PodConfig.Pod writes for a
// whole-system root (a fake host-layout driver root) through RunDaemon: the
// fake control tool runs chrooted into the root, with its pipe and log
// directories where the Pod mounts them (below the root's /tmp, the Pod's
// emptyDir; here plain directories of the root), and takes the settings.
// Root only (the fake root has device nodes; chroot).
func TestRunDaemonChrooted(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a fake driver root and chroot need root")
	}
	root := fakedriver.ForTest(t, "l4", "node-a")
	c := testConfig(DetectLayout(root))
	require.True(t, c.Layout.Chroot, "a host-layout root has a shell")
	p := c.Pod(uid, &sharing.MPSDaemon{Dir: "/unused", Devices: []string{gpuA}, ActiveThreadPercentage: 30})
	var o DaemonOptions
	for _, a := range p.Spec.Containers[0].Args[1:] {
		k, v, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		switch k {
		case "control":
			o.Control = v
		case "chroot":
			require.Equal(t, PodDriverRoot, v)
			o.Chroot = root
		case "pipe-dir":
			o.PipeDir = v
		case "log-dir":
			o.LogDir = v
		case "devices":
			o.Devices = strings.Split(v, ",")
		case "set":
			o.Settings = append(o.Settings, v)
		default:
			t.Fatalf("argument %q", a)
		}
	}
	// What the Pod's mounts make: the pipe and log directories below the
	// root's /tmp, the root itself read-only.
	for _, m := range p.Spec.Containers[0].VolumeMounts {
		if m.Name == "pipe" || m.Name == "log" {
			rel, ok := strings.CutPrefix(m.MountPath, PodChrootTmp+"/")
			require.True(t, ok, "%s is below the root's /tmp: %s", m.Name, m.MountPath)
			require.NoError(t, os.MkdirAll(filepath.Join(root, "tmp", rel), 0o755))
		}
	}
	logDir := filepath.Join(root, o.LogDir)
	o.StartTimeout = 20 * time.Second
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- RunDaemon(ctx, o) }()
	require.Eventually(t, func() bool {
		s, err := fakegpu.ReadMPSState(logDir)
		return err == nil && s.ActiveThreadPercentage == 30
	}, 30*time.Second, 50*time.Millisecond, "the chrooted daemon answers and takes the settings")
	cancel()
	requireDaemonReturned(t, done)
	st, err := fakegpu.ReadMPSState(logDir)
	require.NoError(t, err)
	require.Equal(t, []string{gpuA}, st.Devices)
	require.Error(t, syscall.Kill(st.PID, 0), "the daemon quit")
	require.FileExists(t, filepath.Join(logDir, "daemon.out"))
}
