package mpspod

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpudra/gpudra/internal/plugin/sharing"
	"github.com/gpudra/gpudra/test/fakegpu"
	"github.com/gpudra/gpudra/test/nvmlsim"
)

const (
	uid  = "aaaaaaaa-0000-0000-0000-000000000001"
	gpuA = "GPU-00000000-1111-2222-3333-444444444444"
	gpuB = "GPU-00000000-1111-2222-3333-555555555555"
)

func touch(t *testing.T, root string, paths ...string) {
	for _, p := range paths {
		require.NoError(t, os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, p), nil, 0o755))
	}
}

func TestDetectLayout(t *testing.T) {
	for name, tc := range map[string]struct {
		files []string
		want  Layout
	}{
		"host install: a shell, chrooted": {
			files: []string{"usr/bin/sh", "usr/bin/nvidia-cuda-mps-control"},
			want:  Layout{Chroot: true, Control: "/usr/bin/nvidia-cuda-mps-control"},
		},
		"driver container: /bin/sh": {
			files: []string{"bin/sh", "usr/bin/nvidia-cuda-mps-control"},
			want:  Layout{Chroot: true, Control: "/usr/bin/nvidia-cuda-mps-control"},
		},
		"GKE: bin and lib64, no shell, no libc of its own": {
			files: []string{"bin/nvidia-cuda-mps-control", "lib64/libnvidia-ml.so.1"},
			want: Layout{Control: "/driver-root/bin/nvidia-cuda-mps-control",
				Env: []string{"PATH=/driver-root/bin:/usr/local/bin:/usr/bin:/bin", "LD_LIBRARY_PATH=/driver-root/lib64"}},
		},
		"no shell, no lib64: the loader path is left alone": {
			files: []string{"usr/bin/nvidia-cuda-mps-control", "usr/lib/x86_64-linux-gnu/libc.so.6"},
			want:  Layout{Control: "/driver-root/usr/bin/nvidia-cuda-mps-control", Env: []string{"PATH=/driver-root/usr/bin:/usr/local/bin:/usr/bin:/bin"}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			touch(t, root, tc.files...)
			require.Equal(t, tc.want, DetectLayout(root))
		})
	}
}

func testConfig(l Layout) PodConfig {
	return PodConfig{Namespace: "gpudra-system", NodeName: "node-1", Image: "gpudra:test", HostDriverRoot: "/run/nvidia/driver", Layout: l,
		Node: &metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: "node-1", UID: "node-uid"}}
}

func TestPodShape(t *testing.T) {
	d := &sharing.MPSDaemon{Dir: "/var/lib/kubelet/plugins/gpu.gpudra.io/mps/" + uid, Devices: []string{gpuA}, ActiveThreadPercentage: 50}
	for name, tc := range map[string]struct {
		layout                     Layout
		wantPipe, wantLog, wantShm string
		wantArgs                   []string
		// wantTmp: an emptyDir over the root's /tmp, where the runtime
		// makes the mount points of the pipe and log directories.
		wantTmp bool
	}{
		"chroot: directories where the chrooted daemon looks": {
			layout:   Layout{Chroot: true, Control: "/usr/bin/nvidia-cuda-mps-control"},
			wantPipe: "/driver-root/tmp/nvidia-mps", wantLog: "/driver-root/tmp/nvidia-mps-log", wantShm: "/driver-root/dev/shm",
			wantArgs: []string{"--chroot=/driver-root", "--pipe-dir=/tmp/nvidia-mps", "--log-dir=/tmp/nvidia-mps-log",
				"--set=set_default_active_thread_percentage 50"},
			wantTmp: true,
		},
		"no chroot: nothing is mounted into the driver root": {
			layout:   Layout{Control: "/driver-root/bin/nvidia-cuda-mps-control", Env: []string{"LD_LIBRARY_PATH=/driver-root/lib64"}},
			wantPipe: "/mps/pipe", wantLog: "/mps/log", wantShm: "/dev/shm",
			wantArgs: []string{"--pipe-dir=/mps/pipe", "--log-dir=/mps/log", "--devices=" + gpuA},
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := testConfig(tc.layout)
			p := c.Pod(uid, d)
			require.Equal(t, "gpudra-mps-"+uid, p.Name)
			require.Equal(t, "node-1", p.Spec.NodeName, "pinned to the node, not scheduled")
			require.Equal(t, uid, p.Labels[ClaimLabel])
			require.Equal(t, "Node", p.OwnerReferences[0].Kind)
			require.True(t, p.Spec.HostPID)
			require.False(t, *p.Spec.AutomountServiceAccountToken)
			require.Equal(t, corev1.RestartPolicyOnFailure, p.Spec.RestartPolicy)
			ctr := p.Spec.Containers[0]
			require.Equal(t, []string{Binary}, ctr.Command)
			require.Equal(t, Subcommand, ctr.Args[0])
			for _, a := range tc.wantArgs {
				require.Contains(t, ctr.Args, a)
			}
			mounts := map[string]corev1.VolumeMount{}
			for i, m := range ctr.VolumeMounts {
				mounts[m.Name] = m
				if i > 0 {
					require.NotEqual(t, PodDriverRoot, m.MountPath)
					require.False(t, m.ReadOnly, "%s: the daemon's own directories stay writable", m.Name)
				}
			}
			root := ctr.VolumeMounts[0]
			require.Equal(t, "driver-root", root.Name, "the driver root first, the mounts below it after it")
			require.Equal(t, PodDriverRoot, root.MountPath)
			require.True(t, root.ReadOnly, "the daemon never writes the driver root (the host's root by default)")
			require.Equal(t, corev1.MountPropagationHostToContainer, *root.MountPropagation)
			require.Equal(t, tc.wantPipe, mounts["pipe"].MountPath)
			require.Equal(t, tc.wantLog, mounts["log"].MountPath)
			require.Equal(t, tc.wantShm, mounts["shm"].MountPath)
			hosts := map[string]string{}
			want := map[string]string{"driver-root": "/run/nvidia/driver", "pipe": d.Dir + "/pipe", "log": d.Dir + "/log", "shm": d.Dir + "/shm"}
			for _, v := range p.Spec.Volumes {
				if v.EmptyDir != nil {
					hosts[v.Name] = "emptyDir"
					continue
				}
				hosts[v.Name] = v.HostPath.Path
			}
			if tc.wantTmp {
				want["root-tmp"] = "emptyDir"
				require.Equal(t, PodChrootTmp, mounts["root-tmp"].MountPath)
				require.Equal(t, "root-tmp", ctr.VolumeMounts[1].Name, "/tmp before the mounts below it")
			}
			require.Equal(t, want, hosts)
		})
	}
}

// TestPodRunner: a Pod per daemon of a claim (group 0 named after the
// claim alone, as before daemons per group; a further group with a
// suffix), found again by its labels, deleted and waited for.
func TestPodRunner(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset()
	r := &PodRunner{Client: client, Config: testConfig(Layout{Chroot: true, Control: "/usr/bin/nvidia-cuda-mps-control"}), Poll: 10 * time.Millisecond}
	d := &sharing.MPSDaemon{Dir: "/x/" + uid, Devices: []string{gpuA}}
	d1 := &sharing.MPSDaemon{Group: 1, Dir: "/x/" + uid + "/group-1", Devices: []string{gpuB}, ActiveThreadPercentage: 50}
	_, err := r.Start(ctx, uid, d)
	require.NoError(t, err)
	_, err = r.Start(ctx, uid, d1)
	require.NoError(t, err)
	daemons, err := r.Daemons(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []sharing.DaemonRef{{ClaimUID: uid}, {ClaimUID: uid, Group: 1}}, daemons)
	p1, err := client.CoreV1().Pods("gpudra-system").Get(ctx, "gpudra-mps-"+uid+"-g1", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "1", p1.Labels[GroupLabel])
	require.Contains(t, p1.Spec.Containers[0].Args, "--set=set_default_active_thread_percentage 50")
	require.Equal(t, "/x/"+uid+"/group-1/pipe", p1.Spec.Volumes[1].HostPath.Path)
	p0, err := client.CoreV1().Pods("gpudra-system").Get(ctx, "gpudra-mps-"+uid, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotContains(t, p0.Labels, GroupLabel)

	// A second start (an interrupted earlier attempt) replaces the Pod.
	_, err = r.Start(ctx, uid, d)
	require.NoError(t, err)
	require.Contains(t, r.Describe(ctx, uid, 0, d.Dir), "gpudra-system/gpudra-mps-"+uid)
	require.Contains(t, r.Describe(ctx, uid, 1, d1.Dir), "gpudra-system/gpudra-mps-"+uid+"-g1")

	require.NoError(t, r.Stop(ctx, uid, 0, d.Dir))
	_, err = client.CoreV1().Pods("gpudra-system").Get(ctx, Name(uid, 0), metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err))
	require.NoError(t, r.Stop(ctx, uid, 0, d.Dir), "no Pod is not an error")
	daemons, err = r.Daemons(ctx)
	require.NoError(t, err)
	require.Equal(t, []sharing.DaemonRef{{ClaimUID: uid, Group: 1}}, daemons, "group 1's Pod is stopped on its own")
	require.NoError(t, r.Stop(ctx, uid, 1, d1.Dir))
	daemons, err = r.Daemons(ctx)
	require.NoError(t, err)
	require.Empty(t, daemons)
}

// TestPodName: group 0 keeps the name of a claim's one daemon of earlier
// versions, so an upgraded plugin finds it; further groups get a suffix and
// stay a valid hostname.
func TestPodName(t *testing.T) {
	require.Equal(t, "gpudra-mps-"+uid, Name(uid, 0))
	require.Equal(t, "gpudra-mps-"+uid+"-g2", Name(uid, 2))
	require.LessOrEqual(t, len(Name("01234567-89ab-cdef-0123-456789abcdef", 999)), 63)
}

var (
	fakeOnce sync.Once
	fakePath string
	fakeErr  error
)

func fakeMPSControl(t *testing.T) string {
	fakeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gpudra-fake-mps-")
		if err != nil {
			fakeErr = err
			return
		}
		fakePath = filepath.Join(dir, "gpudra-fake-mps-control")
		if out, err := exec.Command("go", "build", "-o", fakePath, "github.com/gpudra/gpudra/test/cmd/gpudra-fake-mps-control").CombinedOutput(); err != nil {
			fakeErr = err
			t.Log(string(out))
		}
	})
	require.NoError(t, fakeErr)
	return fakePath
}

// TestRunDaemon: the Pod's process starts the daemon, applies the claim's
// settings, and on SIGTERM (the Pod deleted) stops it through its pipe, also
// when the Pod is deleted before the daemon has answered (the settings still
// being sent then ended in an error and a killed daemon).
func TestRunDaemon(t *testing.T) {
	// The fake tool needs libnvidia-ml like the real one, which a root's
	// loader would give it (chroot) or the daemon's LD_LIBRARY_PATH
	// (GKE's lib64): here the simulated one is preloaded into its
	// environment (the daemon passes its own on).
	env, err := nvmlsim.ToolEnv()
	require.NoError(t, err)
	t.Setenv("LD_PRELOAD", strings.TrimPrefix(env[0], "LD_PRELOAD="))
	// Built before any clock below starts: under load a build takes longer
	// than the wait for the daemon's settings.
	control := fakeMPSControl(t)
	for _, tc := range []struct {
		name string
		// configured: the Pod is deleted once the settings are applied,
		// else before the daemon is started.
		configured bool
	}{
		{name: "deleted once configured", configured: true},
		{name: "deleted while starting"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			dir := t.TempDir()
			pipe, logDir := filepath.Join(dir, "pipe"), filepath.Join(dir, "log")
			require.NoError(t, os.MkdirAll(pipe, 0o755))
			require.NoError(t, os.MkdirAll(logDir, 0o755))
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			if !tc.configured {
				cancel()
			}
			done := make(chan error, 1)
			go func() {
				done <- RunDaemon(ctx, DaemonOptions{Control: control, PipeDir: pipe, LogDir: logDir, Devices: []string{gpuA},
					Settings: []string{"set_default_active_thread_percentage 30"}, StartTimeout: 10 * time.Second})
			}()
			if tc.configured {
				require.Eventually(t, func() bool {
					s, err := fakegpu.ReadMPSState(logDir)
					return err == nil && s.ActiveThreadPercentage == 30
				}, 10*time.Second, 20*time.Millisecond)
				cancel()
			}
			requireDaemonReturned(t, done)
			st, err := fakegpu.ReadMPSState(logDir)
			require.NoError(t, err, "the daemon started")
			require.Equal(t, []string{gpuA}, st.Devices)
			require.Error(t, syscall.Kill(st.PID, 0), "the daemon quit")
			require.NoFileExists(t, filepath.Join(pipe, fakegpu.ControlSocket), "the daemon quit through its pipe, it was not killed")
			out, _ := os.ReadFile(filepath.Join(logDir, "daemon.out"))
			require.NotContains(t, strings.ToLower(string(out)), "panic")
		})
	}
}

// requireDaemonReturned waits for RunDaemon's result on done, after its
// context ended, and requires it to be nil.
func requireDaemonReturned(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("RunDaemon did not return after its context ended")
	}
}
