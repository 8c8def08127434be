package gpuverify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2/ktesting"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/internal/plugin/cdi"
	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/test/nvmlmem"
	"github.com/gpudra/gpudra/test/sim"
)

// rootedEdits are the simulated device nodes re-homed under a fake root, so
// that every host path of the specs exists on a machine without GPUs: the
// device nodes are links to /dev/null (a character device), plus a driver
// library mount and a hook, the kinds of host paths nvcdi adds.
type rootedEdits struct {
	root string
	// deviceEnv is added to every GPU's edits.
	deviceEnv []string
}

const (
	fakeLibrary = "/usr/lib/x86_64-linux-gnu/libcuda.so.1"
	fakeHook    = "/usr/bin/nvidia-cdi-hook"
)

func newRootedEdits(t *testing.T) rootedEdits {
	root := t.TempDir()
	for _, p := range []string{"/dev", filepath.Dir(fakeLibrary), filepath.Dir(fakeHook)} {
		require.NoError(t, os.MkdirAll(root+p, 0o755))
	}
	require.NoError(t, os.WriteFile(root+fakeLibrary, []byte("stub"), 0o644))
	require.NoError(t, os.WriteFile(root+fakeHook, []byte("#!/bin/sh\nexit 0\n"), 0o755))
	return rootedEdits{root: root}
}

func (e rootedEdits) rehome(nodes []*cdispec.DeviceNode) error {
	for _, n := range nodes {
		n.HostPath = e.root + n.Path
		if err := os.Symlink("/dev/null", n.HostPath); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	return nil
}

func (e rootedEdits) Common() (*cdispec.ContainerEdits, error) {
	c, err := cdi.SimulatedEdits{}.Common()
	if err != nil {
		return nil, err
	}
	c.Mounts = append(c.Mounts, &cdispec.Mount{HostPath: e.root + fakeLibrary, ContainerPath: fakeLibrary,
		Options: []string{"ro", "nosuid", "nodev", "rbind"}})
	c.Hooks = append(c.Hooks, &cdispec.Hook{HookName: "createContainer", Path: e.root + fakeHook,
		Args: []string{"nvidia-cdi-hook", "update-ldcache"}})
	return c, e.rehome(c.DeviceNodes)
}

func (e rootedEdits) Device(gpu *model.GPU) (*cdispec.ContainerEdits, error) {
	d, err := cdi.SimulatedEdits{}.Device(gpu)
	if err != nil {
		return nil, err
	}
	d.Env = append(d.Env, e.deviceEnv...)
	return d, e.rehome(d.DeviceNodes)
}

// simRun runs the kit against an in-process simulated NVML of profile.
type simRun struct {
	t      *testing.T
	server *sim.Server
	edits  rootedEdits
	cfg    Config
}

func newSimRun(t *testing.T, profile string) *simRun {
	p, err := sim.Load(profile, nil)
	require.NoError(t, err)
	r := &simRun{t: t, server: sim.NewServer(p, "verify-node"), edits: newRootedEdits(t)}
	r.cfg = Config{
		Open: func() (nvml.Interface, error) {
			if ret := r.server.Init(); ret != nvml.SUCCESS {
				return nil, ret
			}
			return r.server, nil
		},
		Library:    "simulated (" + profile + ")",
		Edits:      func(context.Context, nvml.Interface, *model.Node) (cdi.EditsProvider, error) { return r.edits, nil },
		NodeName:   "verify-node",
		DriverName: "gpu.gpudra.io",
		Watch:      time.Second,
		// Several probes during the watch.
		ProbeInterval: 300 * time.Millisecond,
		TempDir:       t.TempDir(),
	}
	return r
}

func (r *simRun) run() (*Report, string) {
	_, ctx := ktesting.NewTestContext(r.t)
	rep, err := Run(ctx, r.cfg)
	require.NoError(r.t, err)
	var out bytes.Buffer
	require.NoError(r.t, rep.WriteText(&out))
	text := out.String()
	r.t.Log("\n" + text)
	lines := strings.Split(strings.TrimSpace(text), "\n")
	require.Equal(r.t, rep.Summary(), lines[len(lines)-1], "the report ends with the summary")
	require.Equal(r.t, ReadOnlyStatement, lines[1], "the read-only statement heads the report")
	left, err := os.ReadDir(r.cfg.TempDir)
	require.NoError(r.t, err)
	require.Empty(r.t, left, "temporary directories are removed")
	return rep, text
}

func failures(rep *Report) []string {
	var out []string
	for _, s := range rep.Sections {
		for _, e := range s.Entries {
			if e.Status == Fail {
				out = append(out, e.Text)
			}
		}
	}
	return out
}

func TestHealthyNode(t *testing.T) {
	r := newSimRun(t, "dgx-h100")
	r.cfg.ShowSlices = true
	rep, text := r.run()
	require.Empty(t, failures(rep))
	require.True(t, rep.OK())
	require.Greater(t, rep.Passed, 30)
	// A simulated NVML's GPUs are not on this machine's PCI bus: step 8
	// reads no sysfs for them.
	require.Contains(t, text, "Skipped: NVML is not a driver root's (simulated (dgx-h100))")
	require.Contains(t, text, "Skipped: NVML is not a library this kit can load in a child process (simulated (dgx-h100))")
	require.Nil(t, rep.Memory)
	// A claim per GPU and one with all eight, each prepared and unprepared.
	require.Len(t, rep.Claims, 9)
	for _, c := range rep.Claims {
		require.True(t, c.Prepared && c.Unprepared, c.Name)
		require.NotNil(t, c.Spec, c.Name)
		require.Contains(t, c.HostPaths, r.edits.root+fakeLibrary, c.Name)
		require.Contains(t, c.HostPaths, r.edits.root+fakeHook, c.Name)
		require.Contains(t, c.HostPaths, r.edits.root+"/dev/nvidiactl", c.Name)
	}
	require.Equal(t, []string{"gpu-0", "gpu-1", "gpu-2", "gpu-3", "gpu-4", "gpu-5", "gpu-6", "gpu-7"}, rep.Claims[8].Devices)
	require.Len(t, rep.Inspection.Node.GPUs, 8)
	require.Len(t, rep.Health.Registered, 8)
	require.Empty(t, rep.Health.Events)
	require.Contains(t, text, "all 8 GPU(s) healthy")
	require.Contains(t, text, "resource.kubernetes.io/pcieRoot:", "-slices shows the attributes")
	require.Len(t, rep.Telemetry.Devices, 8, "telemetry of every GPU")
	for name, fields := range rep.Telemetry.Devices {
		require.Equal(t, 80.0*(1<<30), fields["memory_total_bytes"], name)
		require.Equal(t, 700.0, fields["power_limit_watts"], name)
		require.Equal(t, 1.0, fields["throttle_reason:gpu_idle"], name)
	}

	var out bytes.Buffer
	require.NoError(t, rep.WriteJSON(&out))
	var back Report
	require.NoError(t, json.Unmarshal(out.Bytes(), &back))
	require.Equal(t, rep.Passed, back.Passed)
	require.Zero(t, back.Failed)
	require.Len(t, back.Inspection.ResourceSlices, 1)
	require.Len(t, back.Claims, 9)
	require.Len(t, back.Claims[8].Spec.Devices, 8)
}

// TestStaticMIGIsReadOnly: a GPU in MIG mode is reported with its MIG
// devices, never prepared, and the simulated GPUs' MIG state and compute
// modes are the same after the run.
func TestStaticMIGIsReadOnly(t *testing.T) {
	r := newSimRun(t, "../../internal/plugin/slice/testdata/static-mig.yaml")
	stateFile := filepath.Join(t.TempDir(), "nvml-state.json")
	require.NoError(t, r.server.PersistTo(stateFile))
	before, err := os.ReadFile(stateFile)
	require.NoError(t, err)
	modes := func() []nvml.ComputeMode {
		var out []nvml.ComputeMode
		n, _ := r.server.DeviceGetCount()
		for i := range n {
			d, _ := r.server.DeviceGetHandleByIndex(i)
			m, ret := d.GetComputeMode()
			require.Equal(t, nvml.SUCCESS, ret)
			out = append(out, m)
		}
		return out
	}
	require.Equal(t, nvml.SUCCESS, r.server.Init())
	modesBefore := modes()
	require.Equal(t, nvml.SUCCESS, r.server.Shutdown())

	rep, text := r.run()
	require.Empty(t, failures(rep))
	require.Contains(t, text, "gpu-0 skipped: MIG mode is enabled")
	require.Contains(t, text, "gpu-0-mig-3g40gb-")
	require.Len(t, rep.Claims, 1, "only the GPU not in MIG mode is prepared")
	require.Equal(t, []string{"gpu-1"}, rep.Claims[0].Devices)
	require.Len(t, rep.Inspection.Node.GPUs[0].MIGDevices, 4)
	require.Len(t, rep.Telemetry.Devices, 6, "two GPUs and four MIG devices")
	require.NotContains(t, rep.Telemetry.Devices["gpu-0"], "utilization_ratio", "none for a GPU in MIG mode")
	require.Contains(t, rep.Telemetry.Devices["gpu-1"], "utilization_ratio")

	after, err := os.ReadFile(stateFile)
	require.NoError(t, err)
	require.Equal(t, string(before), string(after), "MIG state unchanged")
	require.Equal(t, nvml.SUCCESS, r.server.Init())
	defer func() { _ = r.server.Shutdown() }()
	require.Equal(t, modesBefore, modes(), "compute modes unchanged")
}

// TestFailures: what goes wrong on a node fails checks, names the cause and
// still cleans up.
func TestFailures(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, r *simRun)
		// want are substrings of failed checks.
		want []string
	}{
		{
			name:  "missing driver library",
			setup: func(t *testing.T, r *simRun) { require.NoError(t, os.Remove(r.edits.root+fakeLibrary)) },
			want:  []string{"- mount ", fakeLibrary + ": stat "},
		},
		{
			name:  "hook not executable",
			setup: func(t *testing.T, r *simRun) { require.NoError(t, os.Chmod(r.edits.root+fakeHook, 0o644)) },
			want:  []string{fakeHook + " is not an executable file"},
		},
		{
			name: "device node is not a device",
			setup: func(t *testing.T, r *simRun) {
				require.NoError(t, os.WriteFile(r.edits.root+"/dev/nvidiactl", nil, 0o644))
			},
			want: []string{"/dev/nvidiactl is not a device file"},
		},
		{
			name:  "device edits select GPUs for a legacy runtime",
			setup: func(_ *testing.T, r *simRun) { r.edits.deviceEnv = []string{"NVIDIA_VISIBLE_DEVICES=GPU-x"} },
			want:  []string{`the container gets NVIDIA_VISIBLE_DEVICES ["GPU-x"]: a runtime in legacy mode would inject GPUs again`},
		},
		{
			name: "critical XID during the watch",
			setup: func(t *testing.T, r *simRun) {
				r.cfg.WatchStarted = func() { require.NoError(t, r.server.InjectXID(gpuUUID(t, r.server, 1), 79)) }
			},
			want: []string{"event: gpu-1 critical XID 79", "health monitor: gpu-1 is Unhealthy", "probe after: gpu-1 does not answer"},
		},
		{
			name: "double-bit ECC during the watch",
			setup: func(t *testing.T, r *simRun) {
				r.cfg.WatchStarted = func() { require.NoError(t, r.server.InjectDoubleBitECC(gpuUUID(t, r.server, 0))) }
			},
			want: []string{"event: gpu-0 double-bit-ecc", "gpu-0: 1 uncorrectable ECC error(s) during the watch"},
		},
		{
			name: "NVML does not open",
			setup: func(_ *testing.T, r *simRun) {
				r.cfg.Open = func() (nvml.Interface, error) { return nil, errors.New("no libnvidia-ml.so.1") }
			},
			want: []string{"open and initialize NVML: no libnvidia-ml.so.1"},
		},
		{
			name: "CDI edits cannot be computed",
			setup: func(_ *testing.T, r *simRun) {
				r.cfg.Edits = func(context.Context, nvml.Interface, *model.Node) (cdi.EditsProvider, error) {
					return nil, errors.New("nvcdi: no driver")
				}
			},
			want: []string{"create the CDI edits provider: nvcdi: no driver"},
		},
		{
			name: "memory not measurable",
			setup: func(_ *testing.T, r *simRun) {
				r.cfg.Footprint = func(context.Context) (nvmlmem.Footprint, error) {
					return nvmlmem.Footprint{}, errors.New("child did not become ready")
				}
			},
			want: []string{"read its GPUs; another idled without it: child did not become ready"},
		},
		{
			name: "memory child read other GPUs",
			setup: func(_ *testing.T, r *simRun) {
				r.cfg.Footprint = func(context.Context) (nvmlmem.Footprint, error) { return nvmlmem.Footprint{GPUs: 1}, nil }
			},
			want: []string{"the child read 1 GPUs, discovery 2"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newSimRun(t, "l4")
			tc.setup(t, r)
			rep, _ := r.run()
			require.False(t, rep.OK())
			got := strings.Join(failures(rep), "\n")
			for _, w := range tc.want {
				require.Contains(t, got, w)
			}
			for _, c := range rep.Claims {
				require.True(t, c.Unprepared, "claim %s unprepared even though a check failed", c.Name)
			}
		})
	}
}

// TestIgnoredXIDIsNoAlarm: an application XID is reported, not failed.
func TestIgnoredXIDIsNoAlarm(t *testing.T) {
	r := newSimRun(t, "l4")
	r.cfg.WatchStarted = func() { require.NoError(t, r.server.InjectXID(gpuUUID(t, r.server, 0), 13)) }
	rep, text := r.run()
	require.Empty(t, failures(rep))
	require.Contains(t, text, "event: gpu-0 XID 13")
	require.Len(t, rep.Health.Events, 1)
	require.True(t, rep.Health.Events[0].Ignored)
}

func TestInterruptedWatchFails(t *testing.T) {
	r := newSimRun(t, "l4")
	r.cfg.Watch = time.Minute
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	r.cfg.WatchStarted = cancel
	rep, err := Run(ctx, r.cfg)
	require.NoError(t, err)
	require.Contains(t, strings.Join(failures(rep), "\n"), "the watch was interrupted")
}

func gpuUUID(t *testing.T, s *sim.Server, index int) string {
	d, ret := s.DeviceGetHandleByIndex(index)
	require.Equal(t, nvml.SUCCESS, ret)
	id, ret := d.GetUUID()
	require.Equal(t, nvml.SUCCESS, ret)
	return id
}
