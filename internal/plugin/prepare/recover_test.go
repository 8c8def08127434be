package prepare

import (
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/internal/plugin/mig"
	"github.com/gpudra/gpudra/test/sim"
)

const longSlice = `{"strategy":"TimeSlicing","timeSlicing":{"interval":"Long"}}`

// Recover settles every claim on its own: one it cannot recover is
// reported, the others are restored and served, and the failed one can
// still be unprepared.
func TestRecoverIsPerClaim(t *testing.T) {
	tests := []struct {
		name string
		// change is what differs when the plugin starts again.
		change  func(e *env)
		wantErr string
	}{
		{"its GPU is gone", func(e *env) { e.node.GPUs = slices.Delete(slices.Clone(e.node.GPUs), 1, 2) },
			"which this node no longer has"},
		{"its time slice cannot be set again", func(e *env) { e.slicer.setLost(e.node.GPUs[1].UUID, syscall.EIO) },
			"input/output error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 3)
			m, _ := e.manager()
			a, c := gpuClaim(uidA, "a", "gpu-0"), gpuClaim(uidC, "c", "gpu-2")
			b := configured(uidB, "b", []alloc{{request: "gpu", device: "gpu-1"}}, longSlice)
			for _, cl := range []*resourceapi.ResourceClaim{a, b, c} {
				_, err := m.Prepare(ctx(t), cl)
				require.NoError(t, err)
			}

			tc.change(e)
			m, rep, err := e.tryManager()
			require.NoError(t, err, "one claim does not stop the recovery of the others")
			require.Equal(t, 2, rep.Restored)
			require.Len(t, rep.Failed, 1)
			require.Equal(t, uidB, rep.Failed[0].ClaimUID)
			require.Equal(t, "default/b", rep.Failed[0].Claim)
			require.ErrorContains(t, rep.Failed[0].Err, tc.wantErr)
			require.Equal(t, 1, strings.Count(rep.Failed[0].Err.Error(), "default/b"), "the claim is named once: %v", rep.Failed[0].Err)
			reg := prometheus.NewPedanticRegistry()
			_, err = NewMetrics(reg, m)
			require.NoError(t, err)
			requireGauge(t, reg, MetricRecoverFailedClaims, 1)

			// The others are served.
			require.Equal(t, []string{uidA}, m.holders("gpu-0"))
			require.Equal(t, []string{uidC}, m.holders("gpu-2"))
			require.NoError(t, m.Unprepare(ctx(t), ref(a)))
			_, err = m.Prepare(ctx(t), gpuClaim(uidD, "d", "gpu-0"))
			require.NoError(t, err)

			// The failed claim is unprepared like any other, and leaves nothing.
			require.NoError(t, m.Unprepare(ctx(t), ref(b)))
			rec, err := m.cfg.Checkpoints.Get(uidB)
			require.NoError(t, err)
			require.Nil(t, rec)
			require.Empty(t, m.holders("gpu-1"))
			specs, err := m.cfg.CDI.ListClaims()
			require.NoError(t, err)
			require.Equal(t, []string{uidC, uidD}, specs)
			requireGauge(t, reg, MetricRecoverFailedClaims, 0)
			requireGauge(t, reg, MetricTimeSliceRestoresPending, 1) // b's GPU does not answer (or is gone)
		})
	}
}

// A MIG device that cannot be destroyed fails its own claim's recovery,
// not the plugin's start.
func TestRecoverWhenAMIGDeviceCannotBeDestroyed(t *testing.T) {
	e := newMIGEnv(t, "dgx-h100", mig.ModeDynamic)
	broken := &brokenMIG{Interface: e.srv, gpu: e.node.GPUs[1].UUID}
	e.mgr = mig.NewManager(broken)
	m, _ := e.manager()
	claims := []*resourceapi.ResourceClaim{gpuClaim("uid-a", "a", "gpu-0-mig-1g10gb-3"),
		gpuClaim("uid-b", "b", "gpu-1-mig-1g10gb-3"), gpuClaim("uid-c", "c", "gpu-2-mig-1g10gb-3")}
	for _, c := range claims {
		_, err := m.Prepare(ctx(t), c)
		require.NoError(t, err)
	}
	broken.set(true)
	require.ErrorContains(t, m.Unprepare(ctx(t), ref(claims[1])), "destroy MIG device gpu-1-mig-1g10gb-3")

	// The plugin restarts; GPU 1 still refuses.
	_ = e.srv.Shutdown()
	e.open()
	broken = &brokenMIG{Interface: e.srv, gpu: e.node.GPUs[1].UUID, on: true}
	e.mgr = mig.NewManager(broken)
	m, rep := e.manager()
	require.Equal(t, 2, rep.Restored)
	require.Len(t, rep.Failed, 1)
	require.Equal(t, "uid-b", rep.Failed[0].ClaimUID)
	require.ErrorContains(t, rep.Failed[0].Err, "destroy MIG device gpu-1-mig-1g10gb-3")
	require.Len(t, e.instances(1), 1, "kept, with its record, for the next attempt")
	require.Len(t, e.instances(0), 1)
	require.Len(t, e.instances(2), 1)

	// The others are served.
	require.NoError(t, m.Unprepare(ctx(t), ref(claims[0])))
	require.Empty(t, e.instances(0))
	_, err := m.Prepare(ctx(t), gpuClaim("uid-d", "d", "gpu-2-mig-1g10gb-4"))
	require.NoError(t, err)

	// Once the GPU lets go, the kubelet's next unprepare finishes the claim.
	broken.set(false)
	require.NoError(t, m.Unprepare(ctx(t), ref(claims[1])))
	require.Empty(t, e.instances(1))
	rec, err := m.cfg.Checkpoints.Get("uid-b")
	require.NoError(t, err)
	require.Nil(t, rec)
}

// A MIG device whose GPU fell off the bus goes with the GPU (its reset
// clears it): unprepare releases the claim instead of failing forever.
func TestUnprepareMIGDeviceOfALostGPU(t *testing.T) {
	e := newMIGEnv(t, "dgx-h100", mig.ModeDynamic)
	lost := &brokenMIG{Interface: e.srv, gpu: e.node.GPUs[1].UUID, ret: nvml.ERROR_GPU_IS_LOST}
	e.mgr = mig.NewManager(lost)
	m, _ := e.manager()
	c := gpuClaim("uid-a", "a", "gpu-1-mig-1g10gb-3")
	_, err := m.Prepare(ctx(t), c)
	require.NoError(t, err)
	lost.set(true)
	require.NoError(t, m.Unprepare(ctx(t), ref(c)))
	rec, err := m.cfg.Checkpoints.Get("uid-a")
	require.NoError(t, err)
	require.Nil(t, rec)
	require.Empty(t, m.holders("gpu-1-mig-1g10gb-3"))
	require.NoFileExists(t, m.cfg.CDI.SpecPath("uid-a"))
}

// The simulated GPU answers what real NVML does for a GPU that is lost,
// needs a reset, or was unbound from the driver (its UUID not found): the
// reset or re-bind it needs clears its MIG devices, so unprepare releases
// the claim instead of failing until then.
func TestUnprepareMIGDeviceOfABrokenGPU(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(s *sim.Server, uuid string) error
	}{
		{"lost", func(s *sim.Server, uuid string) error { return s.SetLost(uuid, true) }},
		{"reset required", func(s *sim.Server, uuid string) error { return s.SetResetRequired(uuid, true) }},
		{"not found (unbound)", func(s *sim.Server, uuid string) error { return s.SetUnbound(uuid, true) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newMIGEnv(t, "dgx-h100", mig.ModeDynamic)
			m, _ := e.manager()
			c := gpuClaim("uid-a", "a", "gpu-1-mig-1g10gb-3")
			_, err := m.Prepare(ctx(t), c)
			require.NoError(t, err)
			require.NoError(t, tc.fault(e.srv, e.node.GPUs[1].UUID))
			require.NoError(t, m.Unprepare(ctx(t), ref(c)))
			rec, err := m.cfg.Checkpoints.Get("uid-a")
			require.NoError(t, err)
			require.Nil(t, rec)
			require.NoFileExists(t, m.cfg.CDI.SpecPath("uid-a"))
			require.NoError(t, e.srv.Reset(e.node.GPUs[1].UUID))
			require.Empty(t, e.instances(1), "the reset took the MIG device")
		})
	}
}

func requireGauge(t *testing.T, reg *prometheus.Registry, name string, want float64) {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			require.Len(t, mf.GetMetric(), 1)
			require.Equal(t, want, mf.GetMetric()[0].GetGauge().GetValue(), name)
			return
		}
	}
	t.Fatalf("metric %s not gathered", name)
}

// brokenMIG is NVML on which, while on, the GPU instances of one GPU cannot
// be looked up (ERROR_UNKNOWN, or ret), so none of them can be destroyed.
type brokenMIG struct {
	nvml.Interface
	gpu string
	ret nvml.Return
	mu  sync.Mutex
	on  bool
}

func (b *brokenMIG) set(on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.on = on
}

func (b *brokenMIG) broken() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.on
}

func (b *brokenMIG) DeviceGetHandleByUUID(uuid string) (nvml.Device, nvml.Return) {
	d, ret := b.Interface.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS || uuid != b.gpu {
		return d, ret
	}
	return brokenDevice{Device: d, lib: b}, ret
}

type brokenDevice struct {
	nvml.Device
	lib *brokenMIG
}

func (d brokenDevice) GetGpuInstanceById(id int) (nvml.GpuInstance, nvml.Return) {
	if d.lib.broken() {
		if d.lib.ret != nvml.SUCCESS {
			return nil, d.lib.ret
		}
		return nil, nvml.ERROR_UNKNOWN
	}
	return d.Device.GetGpuInstanceById(id)
}
