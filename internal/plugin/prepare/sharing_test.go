package prepare

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/plugin/cdi"
	"github.com/gpudra/gpudra/internal/plugin/sharing"
	"github.com/gpudra/gpudra/test/fakegpu"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if fakeMPSPath != "" {
		_ = os.RemoveAll(filepath.Dir(fakeMPSPath))
	}
	os.Exit(code)
}

const (
	uidC = "cccccccc-0000-0000-0000-000000000003"
	uidD = "dddddddd-0000-0000-0000-000000000004"
)

func params(sharingJSON string) string {
	return `{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"GpuClaimParameters","sharing":` + sharingJSON + `}`
}

func configured(uid, name string, allocs []alloc, sharingJSON string) *resourceapi.ResourceClaim {
	return claim(uid, name, allocs, opaque(resourceapi.AllocationConfigSourceClaim, params(sharingJSON)))
}

// shareClaim is a consumable share of device with the given memory.
func shareClaim(uid, name, device, memory, sharingJSON string) *resourceapi.ResourceClaim {
	var c *resourceapi.ResourceClaim
	a := []alloc{{request: "gpu", device: device, share: "5e5e5e5e-0000-0000-0000-" + uid[len(uid)-12:]}}
	if sharingJSON == "" {
		c = claim(uid, name, a)
	} else {
		c = configured(uid, name, a, sharingJSON)
	}
	c.Status.Allocation.Devices.Results[0].ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{
		"memory": resource.MustParse(memory)}
	return c
}

func specEdits(t *testing.T, e *env, uid string) cdispec.ContainerEdits {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.cdiDir, cdi.SpecName(uid)+".json"))
	require.NoError(t, err)
	var s cdispec.Spec
	require.NoError(t, json.Unmarshal(b, &s))
	require.Len(t, s.Devices, 1)
	return s.Devices[0].ContainerEdits
}

func TestTimeSliceAppliedAndRestored(t *testing.T) {
	e := newEnv(t, 2)
	m, _ := e.manager()
	gpu0 := e.node.GPUs[0].UUID
	a := configured(uidA, "ts", []alloc{{request: "gpu", device: "gpu-0"}}, `{"strategy":"TimeSlicing","timeSlicing":{"interval":"Long"}}`)
	_, err := m.Prepare(ctx(t), a)
	require.NoError(t, err)
	require.Equal(t, v1alpha1.LongTimeSlice, e.slicer.get(gpu0))

	// An admin-access claim (a monitor) on the same GPU keeps it time-sliced
	// after the time-sliced claim goes; the last one out restores the default.
	mon := claim(uidB, "monitor", []alloc{{request: "gpu", device: "gpu-0", admin: true}})
	_, err = m.Prepare(ctx(t), mon)
	require.NoError(t, err)
	require.NoError(t, m.Unprepare(ctx(t), ref(a)))
	require.Equal(t, v1alpha1.LongTimeSlice, e.slicer.get(gpu0), "another claim still holds the GPU")
	require.NoError(t, m.Unprepare(ctx(t), ref(mon)))
	require.Equal(t, v1alpha1.DefaultTimeSlice, e.slicer.get(gpu0))

	// An exclusive claim never touches the time slice.
	calls := e.slicer.calls
	_, err = m.Prepare(ctx(t), gpuClaim(uidC, "plain", "gpu-1"))
	require.NoError(t, err)
	require.NoError(t, m.Unprepare(ctx(t), ref(gpuClaim(uidC, "plain", "gpu-1"))))
	require.Equal(t, calls, e.slicer.calls)
}

func TestTimeSliceConflictAndFailure(t *testing.T) {
	e := newEnv(t, 1)
	m, _ := e.manager()
	a := configured(uidA, "admin-long", []alloc{{request: "gpu", device: "gpu-0", admin: true}}, `{"strategy":"TimeSlicing","timeSlicing":{"interval":"Long"}}`)
	_, err := m.Prepare(ctx(t), a)
	require.NoError(t, err)
	b := configured(uidB, "admin-short", []alloc{{request: "gpu", device: "gpu-0", admin: true}}, `{"strategy":"TimeSlicing","timeSlicing":{"interval":"Short"}}`)
	_, err = m.Prepare(ctx(t), b)
	require.ErrorIs(t, err, sharing.ErrUnenforceable)
	require.ErrorContains(t, err, "time-sliced with interval Long for claim default/admin-long")

	// nvidia-smi failing fails the prepare and leaves nothing behind.
	e.slicer.fail = syscall.EIO
	c := configured(uidC, "fails", []alloc{{request: "gpu", device: "gpu-0", admin: true}}, `{"strategy":"TimeSlicing","timeSlicing":{"interval":"Long"}}`)
	_, err = m.Prepare(ctx(t), c)
	require.ErrorIs(t, err, syscall.EIO)
	rec, err := m.cfg.Checkpoints.Get(uidC)
	require.NoError(t, err)
	require.Nil(t, rec)
}

func TestMPSDaemonLifecycle(t *testing.T) {
	e := newEnv(t, 2)
	m, _ := e.manager()
	c := configured(uidA, "mps", []alloc{{request: "gpu", device: "gpu-0"}, {request: "gpu", device: "gpu-1"}},
		`{"strategy":"MPS","mps":{"defaultActiveThreadPercentage":40,"defaultPinnedDeviceMemoryLimit":"8Gi","perDevicePinnedMemoryLimits":{"1":"4Gi"}}}`)
	_, err := m.Prepare(ctx(t), c)
	require.NoError(t, err)
	rec, err := m.cfg.Checkpoints.Get(uidA)
	require.NoError(t, err)
	require.NotNil(t, rec.MPS)
	require.Positive(t, rec.MPS.PID)
	require.Equal(t, []int64{8 << 30, 4 << 30}, rec.MPS.PinnedMemoryLimits)

	// The daemon got the settings through its control pipe.
	logDir := filepath.Join(rec.MPS.Dir, "log")
	st := waitMPSState(t, logDir, func(s *fakegpu.MPSState) bool { return len(s.PinnedMemLimits) == 2 })
	require.Equal(t, 40, st.ActiveThreadPercentage)
	require.Equal(t, map[string]string{"0": "8192M", "1": "4096M"}, st.PinnedMemLimits)
	require.Equal(t, []string{e.node.GPUs[0].UUID, e.node.GPUs[1].UUID}, st.Devices)

	// The container gets the directories and limits through CDI.
	var s cdispec.Spec
	b, err := os.ReadFile(filepath.Join(e.cdiDir, cdi.SpecName(uidA)+".json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &s))
	edits := s.Devices[0].ContainerEdits
	require.Contains(t, edits.Env, "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps")
	require.Contains(t, edits.Env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=40")
	require.Contains(t, edits.Env, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8192M,1=4096M")
	require.Len(t, edits.Mounts, 3)
	require.Equal(t, filepath.Join(rec.MPS.Dir, "pipe"), edits.Mounts[0].HostPath)
	// The claim's containers share the daemon's /dev/shm, created at prepare.
	require.Equal(t, filepath.Join(rec.MPS.Dir, "shm"), edits.Mounts[2].HostPath)
	require.Equal(t, "/dev/shm", edits.Mounts[2].ContainerPath)
	require.DirExists(t, filepath.Join(rec.MPS.Dir, "shm"))

	// A restarted plugin adopts the running daemon ...
	m2, rep := e.manager()
	require.Equal(t, 1, rep.Restored)
	rec2, err := m2.cfg.Checkpoints.Get(uidA)
	require.NoError(t, err)
	require.Equal(t, rec.MPS.PID, rec2.MPS.PID)

	// ... and restarts one that died, with the same settings.
	require.NoError(t, syscall.Kill(rec.MPS.PID, syscall.SIGKILL))
	require.Eventually(t, func() bool { return !processAlive(rec.MPS.PID) }, 10*time.Second, 10*time.Millisecond)
	m3, _ := e.manager()
	rec3, err := m3.cfg.Checkpoints.Get(uidA)
	require.NoError(t, err)
	require.NotEqual(t, rec.MPS.PID, rec3.MPS.PID)
	st = waitMPSState(t, logDir, func(s *fakegpu.MPSState) bool { return s.PID == rec3.MPS.PID && len(s.PinnedMemLimits) == 2 })
	require.Equal(t, 40, st.ActiveThreadPercentage)

	// Unprepare stops it and removes its directories.
	require.NoError(t, m3.Unprepare(ctx(t), ref(c)))
	require.Eventually(t, func() bool { return !processAlive(rec3.MPS.PID) }, 10*time.Second, 10*time.Millisecond)
	require.NoDirExists(t, rec.MPS.Dir)
}

func TestMPSOrphanAndInterruptedPrepareAreStopped(t *testing.T) {
	e := newEnv(t, 1)
	m, _ := e.manager()
	c := configured(uidA, "mps", []alloc{{request: "gpu", device: "gpu-0"}}, `{"strategy":"MPS"}`)
	defer func() { testHookAfter = nil }()
	testHookAfter = func(phase string) {
		if phase == phaseCDIWritten {
			panic("crash")
		}
	}
	require.Panics(t, func() { _, _ = m.Prepare(ctx(t), c) })
	testHookAfter = nil
	dir := filepath.Join(e.mpsRoot, uidA)
	pid := readPID(t, dir)
	require.True(t, processAlive(pid))

	_, rep := e.manager()
	require.Equal(t, 1, rep.RolledBack)
	require.Eventually(t, func() bool { return !processAlive(pid) }, 10*time.Second, 10*time.Millisecond)
	require.NoDirExists(t, dir)
}

func TestConsumableShares(t *testing.T) {
	e := newEnv(t, 1)
	m, _ := e.manager()
	// Four 20Gi shares of one GPU: each gets its own daemon limited to 20Gi.
	uids := []string{uidA, uidB, uidC, uidD}
	for i, uid := range uids {
		c := shareClaim(uid, "share"+string(rune('a'+i)), "gpu-0", "20Gi", "")
		devs, err := m.Prepare(ctx(t), c)
		require.NoError(t, err)
		require.NotNil(t, devs[0].ShareID)
		require.Contains(t, specEdits(t, e, uid).Env, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20480M")
		rec, err := m.cfg.Checkpoints.Get(uid)
		require.NoError(t, err)
		require.Equal(t, int64(20<<30), rec.Devices[0].ConsumedMemory)
	}
	require.Len(t, m.holders("gpu-0"), 4, "the GPU is held (reference-counted) by every share")
	for _, uid := range uids {
		require.NoError(t, m.Unprepare(ctx(t), ref(shareClaim(uid, "x", "gpu-0", "20Gi", ""))))
	}
	require.Empty(t, m.holders("gpu-0"))

	tests := []struct {
		name, sharing, want string
	}{
		{"MPS limit within the share", `{"strategy":"MPS","mps":{"defaultPinnedDeviceMemoryLimit":"10Gi"}}`, ""},
		{"MPS limit above the share", `{"strategy":"MPS","mps":{"defaultPinnedDeviceMemoryLimit":"30Gi"}}`,
			"the MPS pinned-memory limit of gpu-0 (30720M) exceeds the memory of its consumable share"},
		{"per-device limit above the share", `{"strategy":"MPS","mps":{"perDevicePinnedMemoryLimits":{"0":"21Gi"}}}`,
			"exceeds the memory of its consumable share"},
		{"per-device ordinal out of range", `{"strategy":"MPS","mps":{"perDevicePinnedMemoryLimits":{"1":"1Gi"}}}`,
			`perDevicePinnedMemoryLimits names device "1", but the request has 1 GPU(s)`},
		{"time slicing cannot limit a share", `{"strategy":"TimeSlicing"}`, "strategy TimeSlicing cannot limit it"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := shareClaim(uidA, "cfg", "gpu-0", "20Gi", tc.sharing)
			_, err := m.Prepare(ctx(t), c)
			if tc.want == "" {
				require.NoError(t, err)
				require.Contains(t, specEdits(t, e, uidA).Env, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=10240M")
				require.NoError(t, m.Unprepare(ctx(t), ref(c)))
				return
			}
			require.ErrorIs(t, err, sharing.ErrUnenforceable)
			require.ErrorContains(t, err, tc.want)
			entries, _ := os.ReadDir(e.mpsRoot)
			require.Empty(t, entries, "a refused claim leaves no daemon")
		})
	}
}

func waitMPSState(t *testing.T, logDir string, ok func(*fakegpu.MPSState) bool) *fakegpu.MPSState {
	t.Helper()
	var st *fakegpu.MPSState
	require.Eventually(t, func() bool {
		var err error
		st, err = fakegpu.ReadMPSState(logDir)
		return err == nil && ok(st)
	}, 10*time.Second, 10*time.Millisecond, "MPS daemon state in %s", logDir)
	return st
}

func readPID(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "daemon.pid"))
	require.NoError(t, err)
	var pid int
	_, err = fmt.Sscan(strings.TrimSpace(string(b)), &pid)
	require.NoError(t, err)
	return pid
}

func processAlive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", fmt.Sprint(pid), "stat"))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z'
}

// An MPS limit above the GPU's memory is refused at prepare: validation
// only bounds limits far above any GPU.
func TestMPSLimitAboveDeviceMemory(t *testing.T) {
	e := newEnv(t, 1)
	m, _ := e.manager()
	mem := int64(e.node.GPUs[0].MemoryBytes)
	for _, tc := range []struct {
		name  string
		limit int64
		want  string
	}{
		{"the GPU's memory", mem, ""},
		{"one MiB more than the GPU's memory", mem + 1<<20, "exceeds the memory of the device"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := configured(uidA, "mps", []alloc{{request: "gpu", device: "gpu-0"}},
				fmt.Sprintf(`{"strategy":"MPS","mps":{"defaultPinnedDeviceMemoryLimit":"%d"}}`, tc.limit))
			_, err := m.Prepare(ctx(t), c)
			if tc.want == "" {
				require.NoError(t, err)
				require.NoError(t, m.Unprepare(ctx(t), ref(c)))
				return
			}
			require.ErrorIs(t, err, sharing.ErrUnenforceable)
			require.ErrorContains(t, err, tc.want)
		})
	}
}
