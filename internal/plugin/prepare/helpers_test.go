package prepare

import (
	"context"
	"fmt"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/plugin/cdi"
	"github.com/gpudra/gpudra/internal/plugin/checkpoint"
	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/internal/plugin/sharing"
	"github.com/gpudra/gpudra/internal/shared/compat"

	"github.com/gpudra/gpudra/test/nvmlsim"
)

const (
	testDriver = "gpu.gpudra.io"
	testPool   = "node-a"
)

// env is one node's on-disk state; several Managers can be created over it
// to simulate restarts.
type env struct {
	t       testing.TB
	node    *model.Node
	ckDir   string
	cdiDir  string
	lockDir string
	bootID  string
	slicer  *recordingSlicer
	modes   *recordingModes
	mpsRoot string
	// mpsEvents collects what the managers report through OnMPSDaemon.
	mpsMu     sync.Mutex
	mpsEvents []MPSDaemonEvent
	// names and pass, when set, replace the native names and turn
	// passthrough on (vfio_test.go).
	names *compat.Names
	pass  *Passthrough
	// syncRecords is Config.SyncRecords.
	syncRecords bool
	// fm is Config.FabricPartitions (fabricpartition_test.go).
	fm FabricPartitions
}

func newEnv(t testing.TB, gpus int) *env {
	node := &model.Node{DriverVersion: "550.54.15", CUDADriverVersion: "12.4"}
	for i := 0; i < gpus; i++ {
		node.GPUs = append(node.GPUs, model.GPU{
			Index: i, Minor: i, UUID: "GPU-0000000" + string(rune('0'+i)) + "-1111-2222-3333-444444444444",
			ProductName: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30,
		})
	}
	return &env{t: t, node: node, ckDir: t.TempDir(), cdiDir: t.TempDir(), lockDir: t.TempDir(), bootID: "boot-1"}
}

// manager creates a Manager over the env's directories and recovers, like a
// plugin (re)start does.
func (e *env) manager() (*Manager, RecoverReport) {
	m, rep, err := e.tryManager()
	require.NoError(e.t, err)
	return m, rep
}

func (e *env) tryManager() (*Manager, RecoverReport, error) {
	e.t.Helper()
	store, err := checkpoint.Open(checkpoint.Options{Dir: e.ckDir,
		BootID: func() (string, error) { return e.bootID, nil }})
	require.NoError(e.t, err)
	edits, err := cdi.NewCachedEdits(cdi.SimulatedEdits{}, e.node.GPUs)
	require.NoError(e.t, err)
	w, err := cdi.NewWriter(e.cdiDir, edits)
	require.NoError(e.t, err)
	if e.modes == nil {
		e.modes = &recordingModes{mode: map[string]nvml.ComputeMode{}}
	}
	if e.slicer == nil {
		e.slicer = &recordingSlicer{set: map[string]v1alpha1.TimeSliceInterval{}}
	}
	if e.mpsRoot == "" {
		e.mpsRoot = e.t.TempDir()
		// The fake daemon, like the real one, outlives its directory.
		e.t.Cleanup(func() { killDaemonsUnder(e.mpsRoot) })
	}
	mps, err := sharing.NewMPSControl(sharing.MPSOptions{ControlPath: fakeMPSControl(e.t), Root: e.mpsRoot, Env: fakeToolEnv(e.t)})
	require.NoError(e.t, err)
	names := compat.Default()
	if e.names != nil {
		names = *e.names
	}
	m, err := New(Config{Names: names, Passthrough: e.pass, PoolName: testPool, Node: e.node, Checkpoints: store, CDI: w, LockDir: e.lockDir,
		TimeSlicer: e.slicer, MPS: mps, OnMPSDaemon: e.recordMPS, ComputeMode: e.modes, SyncRecords: e.syncRecords,
		FabricPartitions: e.fm})
	require.NoError(e.t, err)
	rep, err := m.Recover(ctx(e.t))
	return m, rep, err
}

func ctx(t testing.TB) context.Context {
	_, c := ktesting.NewTestContext(t)
	return c
}

type alloc struct {
	request, device string
	admin           bool
	share           string
}

// claim builds an allocated claim with optional opaque configs (JSON).
func claim(uid, name string, allocs []alloc, configs ...resourceapi.DeviceAllocationConfiguration) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(uid)},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Config: configs},
		}},
	}
	for _, a := range allocs {
		r := resourceapi.DeviceRequestAllocationResult{Request: a.request, Driver: testDriver, Pool: testPool, Device: a.device}
		if a.admin {
			t := true
			r.AdminAccess = &t
		}
		if a.share != "" {
			id := types.UID(a.share)
			r.ShareID = &id
		}
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, r)
	}
	return c
}

func gpuClaim(uid, name string, devices ...string) *resourceapi.ResourceClaim {
	var allocs []alloc
	for _, d := range devices {
		allocs = append(allocs, alloc{request: "gpu", device: d})
	}
	return claim(uid, name, allocs)
}

func opaque(source resourceapi.AllocationConfigSource, params string, requests ...string) resourceapi.DeviceAllocationConfiguration {
	return resourceapi.DeviceAllocationConfiguration{
		Source:   source,
		Requests: requests,
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: testDriver, Parameters: runtime.RawExtension{Raw: []byte(params)},
		}},
	}
}

func ref(c *resourceapi.ResourceClaim) kubeletplugin.NamespacedObject {
	return kubeletplugin.NamespacedObject{UID: c.UID, NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}}
}

// holders returns the claim UIDs holding device (for tests).
func (m *Manager) holders(device string) []string {
	hs, _ := m.cfg.Checkpoints.Holders(device)
	uids := make([]string, 0, len(hs))
	for _, h := range hs {
		uids = append(uids, h.ClaimUID)
	}
	if len(uids) == 0 {
		return nil
	}
	return uids
}

// recordingSlicer is a TimeSlicer that remembers the last interval per GPU.
// Like nvidia-smi run through exec.CommandContext, it does nothing once the
// context is done.
type recordingSlicer struct {
	mu    sync.Mutex
	set   map[string]v1alpha1.TimeSliceInterval
	calls int
	fail  error
	// lost fails the calls for these GPUs only (a GPU fallen off the bus).
	lost map[string]error
	// before, when set, runs first in every call, e.g. to let a deadline pass.
	before func(uuid string)
}

func (r *recordingSlicer) SetTimeSlice(ctx context.Context, uuid string, i v1alpha1.TimeSliceInterval) error {
	r.mu.Lock()
	before := r.before
	r.mu.Unlock()
	if before != nil {
		before(uuid)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("nvidia-smi was not run: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return r.fail
	}
	if err := r.lost[uuid]; err != nil {
		return err
	}
	r.calls++
	r.set[uuid] = i
	return nil
}

func (r *recordingSlicer) get(uuid string) v1alpha1.TimeSliceInterval {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.set[uuid]
}

// setLost makes every call for the GPU fail (err) or succeed again (nil).
func (r *recordingSlicer) setLost(uuid string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lost == nil {
		r.lost = map[string]error{}
	}
	if err == nil {
		delete(r.lost, uuid)
		return
	}
	r.lost[uuid] = err
}

func (r *recordingSlicer) setBefore(f func(uuid string)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.before = f
}

var (
	fakeMPSOnce sync.Once
	fakeMPSPath string
	fakeMPSErr  error
)

// fakeMPSControl builds test/cmd/gpudra-fake-mps-control once per test
// binary: the MPS code paths run a real process, as on a node.
func fakeMPSControl(t testing.TB) string {
	fakeMPSOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gpudra-fake-mps-")
		if err != nil {
			fakeMPSErr = err
			return
		}
		fakeMPSPath = filepath.Join(dir, "gpudra-fake-mps-control")
		out, err := exec.Command("go", "build", "-o", fakeMPSPath, "github.com/gpudra/gpudra/test/cmd/gpudra-fake-mps-control").CombinedOutput()
		if err != nil {
			fakeMPSErr = fmt.Errorf("build fake MPS control: %w\n%s", err, out)
		}
	})
	require.NoError(t, fakeMPSErr)
	return fakeMPSPath
}

// fakeToolEnv starts the fake tools as the plugin starts a driver root's:
// with only the (simulated) libnvidia-ml preloaded.
func fakeToolEnv(t testing.TB) []string {
	env, err := nvmlsim.ToolEnv()
	require.NoError(t, err)
	return env
}

func (e *env) recordMPS(ev MPSDaemonEvent) {
	e.mpsMu.Lock()
	defer e.mpsMu.Unlock()
	e.mpsEvents = append(e.mpsEvents, ev)
}

// takeMPSEvents returns the reported events and forgets them.
func (e *env) takeMPSEvents() []MPSDaemonEvent {
	e.mpsMu.Lock()
	defer e.mpsMu.Unlock()
	evs := e.mpsEvents
	e.mpsEvents = nil
	return evs
}

// killDaemonsUnder kills the MPS control daemons whose pipe directory is
// under root.
func killDaemonsUnder(root string) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		for _, kv := range strings.Split(string(env), "\x00") {
			if dir, ok := strings.CutPrefix(kv, "CUDA_MPS_PIPE_DIRECTORY="); ok && strings.HasPrefix(dir, root+"/") {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}
