package prepare

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/internal/plugin/cdi"
	"github.com/gpudra/gpudra/internal/plugin/checkpoint"
	"github.com/gpudra/gpudra/internal/plugin/discovery"
	"github.com/gpudra/gpudra/internal/plugin/mig"
	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/internal/shared/compat"
	"github.com/gpudra/gpudra/test/sim"
)

// migEnv is a node on a simulated NVML whose MIG state lives in a file, so
// that a "restarted plugin" (a new server and Manager) finds the MIG
// devices the previous one left, as on a real GPU.
type migEnv struct {
	*env
	profile string
	state   string
	mode    mig.Mode
	// profiles is --mig-profiles (empty: every profile is published).
	profiles []string
	srv      *sim.Server
	mgr      *mig.Manager
	// full is each GPU's complete MIG geometry as discovered, whatever
	// profiles publishes: the tests look at the GPUs through it.
	full []*model.MIGGeometry
}

func newMIGEnv(t testing.TB, profile string, mode mig.Mode) *migEnv {
	e := &migEnv{env: newEnv(t, 0), profile: profile, mode: mode, state: filepath.Join(t.TempDir(), "sim.json")}
	e.open()
	return e
}

// open starts a new simulated NVML over the state file and rediscovers.
func (e *migEnv) open() {
	p, err := sim.Load(e.profile, nil)
	require.NoError(e.t, err)
	e.srv = sim.NewServer(p, testPool)
	if e.state != "" {
		require.NoError(e.t, e.srv.PersistTo(e.state))
	}
	require.Equal(e.t, nvml.SUCCESS, e.srv.Init())
	node, err := discovery.Discover(context.Background(), e.srv, discovery.Options{})
	require.NoError(e.t, err)
	mig.Apply(node, e.mode)
	e.full = e.full[:0]
	for _, g := range node.GPUs {
		e.full = append(e.full, g.MIG)
	}
	mig.RestrictProfiles(context.Background(), node, e.profiles)
	e.node = node
	e.mgr = mig.NewManager(e.srv)
}

func (e *migEnv) manager() (*Manager, RecoverReport) {
	e.t.Helper()
	m, rep, err := e.tryManager()
	require.NoError(e.t, err)
	return m, rep
}

func (e *migEnv) tryManager() (*Manager, RecoverReport, error) {
	e.t.Helper()
	store, err := checkpoint.Open(checkpoint.Options{Dir: e.ckDir, BootID: func() (string, error) { return e.bootID, nil }})
	require.NoError(e.t, err)
	edits, err := cdi.NewCachedEdits(cdi.SimulatedEdits{}, e.node.GPUs)
	require.NoError(e.t, err)
	w, err := cdi.NewWriter(e.cdiDir, edits)
	require.NoError(e.t, err)
	w.SetMIGCaps(cdi.SimulatedMIGCaps{})
	m, err := New(Config{Names: compat.Default(), PoolName: testPool, Node: e.node, Checkpoints: store, CDI: w, LockDir: e.lockDir, MIG: e.mgr})
	require.NoError(e.t, err)
	rep, err := m.Recover(ctx(e.t))
	return m, rep, err
}

// restart simulates the plugin process dying and starting again.
func (e *migEnv) restart() (*Manager, RecoverReport) {
	e.reopen()
	return e.manager()
}

// reopen is the NVML side of a restart: a new server over the state file.
func (e *migEnv) reopen() {
	_ = e.srv.Shutdown()
	e.open()
}

// migProfile is a profile of a GPU's full geometry, published or not.
func (e *migEnv) migProfile(gpu int, name string) model.MIGProfile {
	e.t.Helper()
	for _, p := range e.full[gpu].Profiles {
		if p.Name == name {
			return p
		}
	}
	e.t.Fatalf("GPU %d has no MIG profile %s", gpu, name)
	return model.MIGProfile{}
}

func (e *migEnv) instances(gpu int) []mig.Instance {
	insts, err := e.mgr.Instances(e.node.GPUs[gpu].UUID, e.full[gpu])
	require.NoError(e.t, err)
	return insts
}

func (e *migEnv) spec(uid string) string {
	data, err := os.ReadFile(filepath.Join(e.cdiDir, cdi.SpecName(uid)+".json"))
	require.NoError(e.t, err)
	return string(data)
}

func TestDynamicMIGPrepareUnprepare(t *testing.T) {
	e := newMIGEnv(t, "dgx-h100", mig.ModeDynamic)
	m, _ := e.manager()
	c := gpuClaim("uid-a", "a", "gpu-0-mig-1g10gb-3")
	devs, err := m.Prepare(ctx(t), c)
	require.NoError(t, err)
	require.Len(t, devs, 1)

	insts := e.instances(0)
	require.Len(t, insts, 1)
	require.Equal(t, 3, insts[0].Start)
	rec, err := m.cfg.Checkpoints.Get("uid-a")
	require.NoError(t, err)
	require.Equal(t, checkpoint.PrepareCompleted, rec.State)
	require.Equal(t, insts[0].UUID, rec.Devices[0].UUID)
	require.Equal(t, insts[0].GIID, rec.Devices[0].MIG.GIID)
	spec := e.spec("uid-a")
	require.Contains(t, spec, fmt.Sprintf("GPUDRA_MIG_0_%d_%d=%s", insts[0].GIID, insts[0].CIID, insts[0].UUID))
	require.NotContains(t, spec, "NVIDIA_VISIBLE_DEVICES", "set for no GPU, as by NVIDIA's driver")
	require.Contains(t, spec, `"/dev/nvidia0"`, "the parent GPU's device node")
	require.Contains(t, spec, "/dev/nvidia-caps/nvidia-cap", "the MIG capability nodes")

	again, err := m.Prepare(ctx(t), c)
	require.NoError(t, err, "a repeated prepare returns the recorded result")
	require.Equal(t, devs, again)
	require.Len(t, e.instances(0), 1, "and creates nothing")

	require.NoError(t, m.Unprepare(ctx(t), ref(c)))
	require.Empty(t, e.instances(0))
	require.NoError(t, m.Unprepare(ctx(t), ref(c)), "idempotent")
}

func TestDynamicMIGExcludesWholeGPUAtPrepare(t *testing.T) {
	e := newMIGEnv(t, "dgx-h100", mig.ModeDynamic)
	m, _ := e.manager()
	migClaim := gpuClaim("uid-mig", "mig", "gpu-1-mig-3g40gb-0")
	_, err := m.Prepare(ctx(t), migClaim)
	require.NoError(t, err)
	_, err = m.Prepare(ctx(t), gpuClaim("uid-whole", "whole", "gpu-1"))
	require.ErrorIs(t, err, ErrConflict, "GPU 1 has a MIG device")
	_, err = m.Prepare(ctx(t), gpuClaim("uid-over", "over", "gpu-1-mig-1g10gb-2"))
	require.ErrorIs(t, err, ErrConflict, "overlaps the 3g.40gb")
	require.Len(t, e.instances(1), 1, "failed prepares leave nothing behind")

	require.NoError(t, m.Unprepare(ctx(t), ref(migClaim)))
	whole := gpuClaim("uid-whole", "whole", "gpu-1")
	_, err = m.Prepare(ctx(t), whole)
	require.NoError(t, err)
	dev, _ := e.srv.DeviceGetHandleByIndex(1)
	mode, _, _ := dev.GetMigMode()
	require.Equal(t, nvml.DEVICE_MIG_DISABLE, mode, "a GPU used whole runs without MIG")
	_, err = m.Prepare(ctx(t), gpuClaim("uid-mig2", "mig2", "gpu-1-mig-1g10gb-0"))
	require.ErrorIs(t, err, ErrConflict, "the whole GPU is held")
}

func TestDynamicMIGWithTimeSlicing(t *testing.T) {
	e := newMIGEnv(t, "dgx-h100", mig.ModeDynamic)
	m, _ := e.manager()
	c := claim("uid-ts", "ts", []alloc{{request: "gpu", device: "gpu-2-mig-2g20gb-4"}},
		opaque(resourceapi.AllocationConfigSourceClaim,
			`{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"GpuClaimParameters","sharing":{"strategy":"TimeSlicing","timeSlicing":{"interval":"Short"}}}`))
	_, err := m.Prepare(ctx(t), c)
	require.NoError(t, err)
	require.Contains(t, e.spec("uid-ts"), "GPUDRA_SHARING_STRATEGY=TimeSlicing")
	require.Len(t, e.instances(2), 1)
}

// TestDynamicMIGCrashRecovery kills the "plugin" at every phase of a MIG
// prepare and checks that the restarted one leaves no MIG device that no
// prepared claim accounts for, and keeps those that one does.
func TestDynamicMIGCrashRecovery(t *testing.T) {
	for _, tc := range []struct {
		phase    string
		keep     bool
		rollback int
	}{
		{phaseStarted, false, 1},
		{phaseMIGCreated, false, 1},
		{phaseCDIWritten, false, 1},
		{phaseCompleted, true, 0},
	} {
		t.Run(tc.phase, func(t *testing.T) {
			e := newMIGEnv(t, "dgx-h100", mig.ModeDynamic)
			m, _ := e.manager()
			c := gpuClaim("uid-c", "c", "gpu-0-mig-1g20gb-2")
			crash(t, tc.phase, func() { _, _ = m.Prepare(ctx(t), c) })

			m, rep := e.restart()
			require.Equal(t, tc.rollback, rep.RolledBack)
			if !tc.keep {
				require.Empty(t, e.instances(0), "no orphan MIG device after the restart")
				return
			}
			insts := e.instances(0)
			require.Len(t, insts, 1)
			require.Zero(t, rep.MIGDestroyed)
			rec, err := m.cfg.Checkpoints.Get("uid-c")
			require.NoError(t, err)
			require.Equal(t, insts[0].UUID, rec.Devices[0].UUID, "the running container's MIG device is kept")
			require.NoError(t, m.Unprepare(ctx(t), ref(c)))
			require.Empty(t, e.instances(0))
		})
	}
}

func TestDynamicMIGUnprepareCrash(t *testing.T) {
	e := newMIGEnv(t, "dgx-h100", mig.ModeDynamic)
	m, _ := e.manager()
	c := gpuClaim("uid-c", "c", "gpu-0-mig-7g80gb-0")
	_, err := m.Prepare(ctx(t), c)
	require.NoError(t, err)
	crash(t, phaseUnprepareCDIRemoved, func() { _ = m.Unprepare(ctx(t), ref(c)) })
	_, rep := e.restart()
	require.Equal(t, 0, rep.RolledBack, "the record still says PrepareCompleted")
	require.Len(t, e.instances(0), 1, "kept until the kubelet unprepares again")
}

func TestReconcileDestroysStrangersAndRecreatesMissing(t *testing.T) {
	e := newMIGEnv(t, "dgx-h100", mig.ModeDynamic)
	m, _ := e.manager()
	c := gpuClaim("uid-c", "c", "gpu-3-mig-4g40gb-0")
	_, err := m.Prepare(ctx(t), c)
	require.NoError(t, err)
	old := e.instances(3)[0]

	// Someone destroys the claim's device and creates another one by hand.
	require.NoError(t, e.mgr.Destroy(old))
	geo := e.node.GPUs[3].MIG
	p := geo.Profiles[0]
	for _, q := range geo.Profiles {
		if q.Name == "1g.10gb" {
			p = q
		}
	}
	stranger, err := e.mgr.Create(old.ParentUUID, p, 6)
	require.NoError(t, err)

	m, rep := e.restart()
	require.Equal(t, 1, rep.MIGDestroyed)
	require.Equal(t, 1, rep.MIGRecreated)
	insts := e.instances(3)
	require.Len(t, insts, 1)
	require.Equal(t, 0, insts[0].Start)
	require.NotEqual(t, stranger.UUID, insts[0].UUID)
	rec, err := m.cfg.Checkpoints.Get("uid-c")
	require.NoError(t, err)
	require.Equal(t, insts[0].UUID, rec.Devices[0].UUID)
	require.Contains(t, e.spec("uid-c"), insts[0].UUID, "the CDI spec names the new device")
}

func TestStaticMIGPrepare(t *testing.T) {
	e := newMIGEnv(t, "../slice/testdata/static-mig.yaml", mig.ModeStatic)
	m, _ := e.manager()
	require.Equal(t, model.StaticMIG, e.node.GPUs[0].Partitioning)
	before := e.instances(0)
	c := gpuClaim("uid-s", "s", "gpu-0-mig-3g40gb-4")
	_, err := m.Prepare(ctx(t), c)
	require.NoError(t, err)
	spec := e.spec("uid-s")
	require.Contains(t, spec, "/dev/nvidia-caps/nvidia-cap")
	require.NoError(t, m.Unprepare(ctx(t), ref(c)))
	require.Equal(t, before, e.instances(0), "static MIG devices are never created or destroyed")
	_, err = m.Prepare(ctx(t), gpuClaim("uid-w", "w", "gpu-0"))
	require.ErrorIs(t, err, ErrUnknownDevice, "a GPU in static MIG mode is not published whole")
	_, rep := e.restart()
	require.Zero(t, rep.MIGDestroyed)
}
