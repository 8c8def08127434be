package sharing

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/api/v1alpha1"

	"github.com/gpudra/gpudra/test/nvmlsim"
)

var binDir string

// toolEnv starts the fake tools as the plugin starts a driver root's: with
// only the (simulated) libnvidia-ml preloaded (set by TestMain).
var toolEnv []string

// TestMain builds the fake nvidia-smi and MPS control once: the code under
// test runs them as real processes, as on a simulated node. Started with
// helperEnv set, the test binary is instead a plugin instance in a PID
// namespace of its own (mps_pidns_test.go).
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(runPluginHelper())
	}
	dir, err := os.MkdirTemp("", "gpudra-sharing-test-")
	if err != nil {
		panic(err)
	}
	binDir = dir
	for _, name := range []string{"gpudra-fake-nvidia-smi", "gpudra-fake-mps-control"} {
		out, err := exec.Command("go", "build", "-o", filepath.Join(dir, name), "github.com/gpudra/gpudra/test/cmd/"+name).CombinedOutput()
		if err != nil {
			panic(fmt.Sprintf("build %s: %v\n%s", name, err, out))
		}
	}
	env, err := nvmlsim.ToolEnv()
	if err != nil {
		panic(err)
	}
	toolEnv = env
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

const (
	gpuA = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
	gpuB = "GPU-bbbbbbbb-0000-0000-0000-000000000000"
	gpuC = "GPU-cccccccc-0000-0000-0000-000000000000"
	uid  = "12345678-0000-0000-0000-000000000001"
)

func mpsParams(c v1alpha1.MpsConfig) *v1alpha1.GpuClaimParameters {
	return &v1alpha1.GpuClaimParameters{Sharing: &v1alpha1.GpuSharing{Strategy: v1alpha1.MPSStrategy, MPS: &c}}
}

func gi(n int64) *resource.Quantity { return resource.NewQuantity(n<<30, resource.BinarySI) }

func TestPlanMPS(t *testing.T) {
	ts := &v1alpha1.GpuClaimParameters{Sharing: &v1alpha1.GpuSharing{Strategy: v1alpha1.TimeSlicingStrategy}}
	both := []string{gpuA, gpuB}
	tests := []struct {
		name       string
		devs       []Device
		wantNil    bool
		wantDevs   []string
		wantLimits []int64
		wantPct    int32
		wantErr    string
	}{
		{name: "exclusive claim needs no daemon", devs: []Device{{UUID: gpuA, RequestUUIDs: []string{gpuA}}}, wantNil: true},
		{name: "time slicing needs no daemon", devs: []Device{{UUID: gpuA, Config: ts, RequestUUIDs: []string{gpuA}}}, wantNil: true},
		{name: "MPS without settings", devs: []Device{{UUID: gpuA, Config: mpsParams(v1alpha1.MpsConfig{}), RequestUUIDs: []string{gpuA}}},
			wantDevs: []string{gpuA}},
		{name: "default and per-device limits", devs: []Device{
			{UUID: gpuA, Config: mpsParams(v1alpha1.MpsConfig{DefaultActiveThreadPercentage: ptr.To[int32](30), DefaultPinnedDeviceMemoryLimit: gi(8),
				PerDevicePinnedMemoryLimits: map[string]resource.Quantity{"1": *gi(2)}}), RequestUUIDs: both},
			{UUID: gpuB, Config: mpsParams(v1alpha1.MpsConfig{DefaultActiveThreadPercentage: ptr.To[int32](30), DefaultPinnedDeviceMemoryLimit: gi(8),
				PerDevicePinnedMemoryLimits: map[string]resource.Quantity{"1": *gi(2)}}), RequestUUIDs: both},
		}, wantDevs: both, wantLimits: []int64{8 << 30, 2 << 30}, wantPct: 30},
		{name: "a share without config is limited to its memory", devs: []Device{{UUID: gpuA, RequestUUIDs: []string{gpuA}, Share: true, ShareMemory: 20 << 30}},
			wantDevs: []string{gpuA}, wantLimits: []int64{20 << 30}},
		{name: "a share with a lower MPS limit keeps it", devs: []Device{{UUID: gpuA, Config: mpsParams(v1alpha1.MpsConfig{DefaultPinnedDeviceMemoryLimit: gi(5)}),
			RequestUUIDs: []string{gpuA}, Share: true, ShareMemory: 20 << 30}}, wantDevs: []string{gpuA}, wantLimits: []int64{5 << 30}},
		{name: "a share with a higher MPS limit is refused", devs: []Device{{Name: "gpu-0", UUID: gpuA, Config: mpsParams(v1alpha1.MpsConfig{DefaultPinnedDeviceMemoryLimit: gi(21)}),
			RequestUUIDs: []string{gpuA}, Share: true, ShareMemory: 20 << 30}}, wantErr: "the MPS pinned-memory limit of gpu-0 (21504M) exceeds the memory of its consumable share"},
		{name: "a limit above the device's memory is refused", devs: []Device{{Name: "gpu-0", UUID: gpuA, Memory: 80 << 30,
			Config: mpsParams(v1alpha1.MpsConfig{DefaultPinnedDeviceMemoryLimit: gi(81)}), RequestUUIDs: []string{gpuA}}},
			wantErr: "the MPS pinned-memory limit of gpu-0 (82944M) exceeds the memory of the device (81920M)"},
		{name: "a limit equal to the device's memory is kept", devs: []Device{{UUID: gpuA, Memory: 80 << 30,
			Config: mpsParams(v1alpha1.MpsConfig{PerDevicePinnedMemoryLimits: map[string]resource.Quantity{"0": *gi(80)}}), RequestUUIDs: []string{gpuA}}},
			wantDevs: []string{gpuA}, wantLimits: []int64{80 << 30}},
		{name: "a limit that does not fit in int64 is refused, not dropped", devs: []Device{{Name: "gpu-0", UUID: gpuA,
			Config: mpsParams(v1alpha1.MpsConfig{DefaultPinnedDeviceMemoryLimit: ptr.To(resource.MustParse("9223372036854775808"))}), RequestUUIDs: []string{gpuA}}},
			wantErr: "the MPS pinned-memory limit of gpu-0 (9223372036854775808) is not a byte count the plugin can apply"},
		{name: "a time-sliced share of memory is refused", devs: []Device{{Name: "gpu-0", UUID: gpuA, Config: ts, RequestUUIDs: []string{gpuA},
			Share: true, ShareMemory: 4 << 30}}, wantErr: "gpu-0 is a consumable share of " + gpuA + " (4096M of memory), whose memory is enforced through MPS; strategy TimeSlicing cannot limit it"},
		{name: "a share that consumed no memory needs no daemon", devs: []Device{{UUID: gpuA, RequestUUIDs: []string{gpuA}, Share: true}}, wantNil: true},
		{name: "a time-sliced share that consumed no memory needs no daemon", devs: []Device{{UUID: gpuA, Config: ts, RequestUUIDs: []string{gpuA}, Share: true}},
			wantNil: true},
		{name: "an MPS share that consumed no memory gets a daemon without a limit", devs: []Device{{UUID: gpuA, Config: mpsParams(v1alpha1.MpsConfig{}),
			RequestUUIDs: []string{gpuA}, Share: true}}, wantDevs: []string{gpuA}},
		{name: "an MPS share that consumed no memory keeps its own limit", devs: []Device{{UUID: gpuA, Config: mpsParams(v1alpha1.MpsConfig{DefaultPinnedDeviceMemoryLimit: gi(30)}),
			RequestUUIDs: []string{gpuA}, Share: true}}, wantDevs: []string{gpuA}, wantLimits: []int64{30 << 30}},
		{name: "a MIG share is limited like a GPU share", devs: []Device{{UUID: gpuA, RequestUUIDs: []string{gpuA}, Share: true, ShareMemory: 5 << 30, MIG: true}},
			wantDevs: []string{gpuA}, wantLimits: []int64{5 << 30}},
		{name: "per-device ordinal beyond the request", devs: []Device{{UUID: gpuA, Config: mpsParams(v1alpha1.MpsConfig{
			PerDevicePinnedMemoryLimits: map[string]resource.Quantity{"2": *gi(1)}}), RequestUUIDs: both}},
			wantErr: `names device "2", but the request has 2 GPU(s) (ordinals 0 to 1)`},
		{name: "per-device limit by UUID", devs: []Device{
			{UUID: gpuA, Config: mpsParams(v1alpha1.MpsConfig{DefaultPinnedDeviceMemoryLimit: gi(8),
				PerDevicePinnedMemoryLimits: map[string]resource.Quantity{gpuB: *gi(2)}}), RequestUUIDs: both},
			{UUID: gpuB, Config: mpsParams(v1alpha1.MpsConfig{DefaultPinnedDeviceMemoryLimit: gi(8),
				PerDevicePinnedMemoryLimits: map[string]resource.Quantity{gpuB: *gi(2)}}), RequestUUIDs: both},
		}, wantDevs: both, wantLimits: []int64{8 << 30, 2 << 30}},
		{name: "per-device UUID not allocated to the request", devs: []Device{{UUID: gpuA, Config: mpsParams(v1alpha1.MpsConfig{
			PerDevicePinnedMemoryLimits: map[string]resource.Quantity{gpuB: *gi(1)}}), RequestUUIDs: []string{gpuA}}},
			wantErr: `names device "` + gpuB + `", which is not one of the request's devices (` + gpuA + `)`},
		{name: "a device named by ordinal and by UUID", devs: []Device{{UUID: gpuA, Config: mpsParams(v1alpha1.MpsConfig{
			PerDevicePinnedMemoryLimits: map[string]resource.Quantity{gpuA: *gi(1), "0": *gi(2)}}), RequestUUIDs: both}},
			wantErr: `both "0" and "` + gpuA + `" name device ` + gpuA},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			daemons, err := PlanMPS(tc.devs)
			if tc.wantErr != "" {
				require.ErrorIs(t, err, ErrUnenforceable)
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			if tc.wantNil {
				require.Empty(t, daemons)
				return
			}
			require.Len(t, daemons, 1)
			d := daemons[0]
			require.Equal(t, tc.wantDevs, d.Devices)
			require.Equal(t, tc.wantLimits, d.PinnedMemoryLimits)
			require.Equal(t, tc.wantPct, d.ActiveThreadPercentage)
		})
	}
}

// TestPlanMPSGroups: one daemon per configuration group, as NVIDIA's driver
// runs one per configuration of a claim; devices with equal MPS settings
// share one.
func TestPlanMPSGroups(t *testing.T) {
	pct := func(p int32) *v1alpha1.GpuClaimParameters {
		return mpsParams(v1alpha1.MpsConfig{DefaultActiveThreadPercentage: ptr.To(p)})
	}
	type group struct {
		devs   []string
		pct    int32
		limits []int64
	}
	tests := []struct {
		name string
		devs []Device
		want []group
	}{
		{name: "percentages 20 and 50: two daemons", devs: []Device{
			{Name: "gpu-0", UUID: gpuA, Config: pct(20), RequestUUIDs: []string{gpuA}},
			{Name: "gpu-1", UUID: gpuB, Config: pct(50), RequestUUIDs: []string{gpuB}},
		}, want: []group{{devs: []string{gpuA}, pct: 20}, {devs: []string{gpuB}, pct: 50}}},
		{name: "the same settings: one daemon", devs: []Device{
			{UUID: gpuA, Config: pct(20), RequestUUIDs: []string{gpuA}},
			{UUID: gpuB, Config: pct(20), RequestUUIDs: []string{gpuB}},
		}, want: []group{{devs: []string{gpuA, gpuB}, pct: 20}}},
		{name: "differing limits: two daemons, each with its device's limit", devs: []Device{
			{UUID: gpuA, Config: mpsParams(v1alpha1.MpsConfig{DefaultPinnedDeviceMemoryLimit: gi(2)}), RequestUUIDs: []string{gpuA}},
			{UUID: gpuB, Config: mpsParams(v1alpha1.MpsConfig{}), RequestUUIDs: []string{gpuB}},
		}, want: []group{{devs: []string{gpuA}, limits: []int64{2 << 30}}, {devs: []string{gpuB}}}},
		{name: "an exclusive device between two groups gets none", devs: []Device{
			{UUID: gpuA, Config: pct(50), RequestUUIDs: []string{gpuA}},
			{UUID: gpuC, RequestUUIDs: []string{gpuC}},
			{UUID: gpuB, Config: pct(20), RequestUUIDs: []string{gpuB}},
		}, want: []group{{devs: []string{gpuA}, pct: 50}, {devs: []string{gpuB}, pct: 20}}},
		{name: "a share limited to its memory and an MPS device with a percentage", devs: []Device{
			{UUID: gpuA, RequestUUIDs: []string{gpuA}, Share: true, ShareMemory: 4 << 30},
			{UUID: gpuB, Config: pct(30), RequestUUIDs: []string{gpuB}},
		}, want: []group{{devs: []string{gpuA}, limits: []int64{4 << 30}}, {devs: []string{gpuB}, pct: 30}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			daemons, err := PlanMPS(tc.devs)
			require.NoError(t, err)
			require.Len(t, daemons, len(tc.want))
			for i, w := range tc.want {
				require.Equal(t, i, daemons[i].Group)
				require.Equal(t, w.devs, daemons[i].Devices)
				require.Equal(t, w.pct, daemons[i].ActiveThreadPercentage)
				require.Equal(t, w.limits, daemons[i].PinnedMemoryLimits)
			}
		})
	}
}

// TestContainerEditsPerGroup: a device's container reaches only the daemon
// of its own group: its pipe directory and its percentage.
func TestContainerEditsPerGroup(t *testing.T) {
	d0 := &MPSDaemon{Dir: "/mps/x", Devices: []string{gpuA}, ActiveThreadPercentage: 20}
	d1 := &MPSDaemon{Group: 1, Dir: "/mps/x/group-1", Devices: []string{gpuB}, ActiveThreadPercentage: 50}
	env, mounts := ContainerEdits(d1, gpuB, []string{gpuB})
	require.Contains(t, env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50")
	require.Equal(t, "/mps/x/group-1/pipe", mounts[0].HostPath)
	env, _ = ContainerEdits(d0, gpuB, []string{gpuB})
	require.Empty(t, env, "group 0's daemon does not serve gpuB")
}

func TestContainerEdits(t *testing.T) {
	d := &MPSDaemon{Dir: "/var/lib/mps/x", Devices: []string{gpuA, gpuB}, ActiveThreadPercentage: 25,
		PinnedMemoryLimits: []int64{0, 3 << 30}}
	env, mounts := ContainerEdits(d, gpuB, []string{gpuB, gpuA})
	require.Equal(t, []string{"CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps", "CUDA_MPS_LOG_DIRECTORY=/var/log/nvidia-mps",
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=3072M"}, env,
		"limits are keyed by the ordinal the container sees")
	require.Len(t, mounts, 3)
	for i, want := range []struct{ host, container, mode string }{
		{"/var/lib/mps/x/pipe", ContainerPipeDir, "rw"},
		{"/var/lib/mps/x/log", ContainerLogDir, "ro"},
		// The daemon's /dev/shm is every client's.
		{"/var/lib/mps/x/shm", "/dev/shm", "rw"},
	} {
		require.Equal(t, want.host, mounts[i].HostPath)
		require.Equal(t, want.container, mounts[i].ContainerPath)
		require.Equal(t, []string{"rbind", want.mode, "nosuid", "nodev"}, mounts[i].Options)
	}

	env, mounts = ContainerEdits(d, "GPU-other", []string{"GPU-other"})
	require.Nil(t, env)
	require.Nil(t, mounts)
	env, _ = ContainerEdits(nil, gpuA, []string{gpuA})
	require.Nil(t, env)
}

func TestNvidiaSMI(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	state := t.TempDir()
	smi := NvidiaSMI{Path: filepath.Join(binDir, "gpudra-fake-nvidia-smi"), Env: append([]string{SimulatedStateDirEnv + "=" + state}, toolEnv...)}
	for _, tc := range []struct {
		interval v1alpha1.TimeSliceInterval
		want     string
	}{{v1alpha1.LongTimeSlice, "3"}, {v1alpha1.ShortTimeSlice, "1"}, {v1alpha1.DefaultTimeSlice, "0"}} {
		require.NoError(t, smi.SetTimeSlice(ctx, gpuA, tc.interval))
		b, err := os.ReadFile(filepath.Join(state, "timeslice", gpuA))
		require.NoError(t, err)
		require.Equal(t, tc.want, strings.TrimSpace(string(b)))
	}
	err := smi.SetTimeSlice(ctx, "not-a-uuid", v1alpha1.LongTimeSlice)
	require.ErrorContains(t, err, `No devices were found matching "not-a-uuid"`)
	require.ErrorIs(t, NvidiaSMI{Path: "/nonexistent/nvidia-smi"}.SetTimeSlice(ctx, gpuA, v1alpha1.LongTimeSlice), ErrNoTool)
	require.ErrorIs(t, NvidiaSMI{}.SetTimeSlice(ctx, gpuA, v1alpha1.LongTimeSlice), ErrNoTool)
}

func TestCommands(t *testing.T) {
	require.Empty(t, Commands(&MPSDaemon{Devices: []string{gpuA}}))
	require.Equal(t, []string{"set_default_active_thread_percentage 50", "set_default_device_pinned_mem_limit 1 1536M"},
		Commands(&MPSDaemon{ActiveThreadPercentage: 50, PinnedMemoryLimits: []int64{0, 1536 << 20}}))
}
