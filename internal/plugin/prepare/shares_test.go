package prepare

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/plugin/cdi"
	"github.com/gpudra/gpudra/internal/plugin/checkpoint"
	"github.com/gpudra/gpudra/internal/plugin/mig"
	"github.com/gpudra/gpudra/internal/plugin/sharing"
	"github.com/gpudra/gpudra/internal/shared/compat"
)

// TestSharesWithoutMemory: with --consumable-shares=unlimited or a count, a
// share that requests no memory consumes none. It gets no pinned-memory
// limit and no MPS daemon unless its config asks for MPS, and it may be
// time-sliced as long as all time-sliced holders of the GPU agree.
func TestSharesWithoutMemory(t *testing.T) {
	e := newEnv(t, 1)
	m, _ := e.manager()
	gpu := e.node.GPUs[0].UUID
	long, medium := `{"strategy":"TimeSlicing","timeSlicing":{"interval":"Long"}}`, `{"strategy":"TimeSlicing","timeSlicing":{"interval":"Medium"}}`
	mpsEnv := func(uid string) []string {
		var out []string
		for _, v := range specEdits(t, e, uid).Env {
			if strings.HasPrefix(v, "CUDA_MPS_") {
				out = append(out, v)
			}
		}
		return out
	}

	plain := shareClaim(uidA, "plain", "gpu-0", "0", "")
	devs, err := m.Prepare(ctx(t), plain)
	require.NoError(t, err)
	require.NotNil(t, devs[0].ShareID)
	require.Empty(t, mpsEnv(uidA), "no MPS daemon, no limit")
	require.NoDirExists(t, filepath.Join(e.mpsRoot, uidA))
	rec, err := m.cfg.Checkpoints.Get(uidA)
	require.NoError(t, err)
	require.Nil(t, rec.MPS)

	sliced := shareClaim(uidB, "sliced", "gpu-0", "0", long)
	_, err = m.Prepare(ctx(t), sliced)
	require.NoError(t, err)
	require.Equal(t, v1alpha1.LongTimeSlice, e.slicer.get(gpu))
	require.Empty(t, mpsEnv(uidB))

	same := shareClaim(uidC, "same", "gpu-0", "0", long)
	_, err = m.Prepare(ctx(t), same)
	require.NoError(t, err, "the same time slice as the GPU's other holder")

	_, err = m.Prepare(ctx(t), shareClaim(uidD, "other", "gpu-0", "0", medium))
	require.ErrorIs(t, err, sharing.ErrUnenforceable)
	require.ErrorContains(t, err, "is time-sliced with interval Long for claim default/sliced")

	withMPS := shareClaim(uidD, "mps", "gpu-0", "0", `{"strategy":"MPS"}`)
	_, err = m.Prepare(ctx(t), withMPS)
	require.NoError(t, err)
	env := mpsEnv(uidD)
	require.Contains(t, env, "CUDA_MPS_PIPE_DIRECTORY="+sharing.ContainerPipeDir, "the daemon it asked for")
	for _, v := range env {
		require.False(t, strings.HasPrefix(v, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="), "no limit on a share of no memory: %s", v)
	}
	require.Len(t, m.holders("gpu-0"), 4)

	for _, c := range []string{uidA, uidB, uidC, uidD} {
		require.NoError(t, m.Unprepare(ctx(t), ref(shareClaim(c, "x", "gpu-0", "0", ""))))
	}
	require.Equal(t, v1alpha1.DefaultTimeSlice, e.slicer.get(gpu), "the last holder restores the time slice")
	entries, _ := os.ReadDir(e.mpsRoot)
	require.Empty(t, entries)
	require.Empty(t, m.holders("gpu-0"))
}

// TestStaticMIGShares: with consumable shares a static MIG device is shared
// like a whole GPU: each share that consumed memory gets its own MPS daemon
// on the MIG device, limited to its share.
func TestStaticMIGShares(t *testing.T) {
	e := newMIGEnv(t, "../slice/testdata/static-mig.yaml", mig.ModeStatic)
	store, err := checkpoint.Open(checkpoint.Options{Dir: e.ckDir, BootID: func() (string, error) { return e.bootID, nil }})
	require.NoError(t, err)
	edits, err := cdi.NewCachedEdits(cdi.SimulatedEdits{}, e.node.GPUs)
	require.NoError(t, err)
	w, err := cdi.NewWriter(e.cdiDir, edits)
	require.NoError(t, err)
	w.SetMIGCaps(cdi.SimulatedMIGCaps{})
	e.mpsRoot = t.TempDir()
	t.Cleanup(func() { killDaemonsUnder(e.mpsRoot) })
	mps, err := sharing.NewMPSControl(sharing.MPSOptions{ControlPath: fakeMPSControl(t), Root: e.mpsRoot, Env: fakeToolEnv(t)})
	require.NoError(t, err)
	m, err := New(Config{Names: compat.Default(), PoolName: testPool, Node: e.node, Checkpoints: store, CDI: w, LockDir: e.lockDir,
		MIG: e.mgr, MPS: mps})
	require.NoError(t, err)
	_, err = m.Recover(ctx(t))
	require.NoError(t, err)

	const dev = "gpu-0-mig-3g40gb-4"
	var claims []*resourceapi.ResourceClaim
	for i, uid := range []string{uidA, uidB} {
		c := shareClaim(uid, fmt.Sprintf("mig-share-%d", i), dev, "5Gi", "")
		devs, err := m.Prepare(ctx(t), c)
		require.NoError(t, err)
		require.NotNil(t, devs[0].ShareID)
		rec, err := m.cfg.Checkpoints.Get(uid)
		require.NoError(t, err)
		require.NotNil(t, rec.MPS, "a daemon of its own")
		require.Equal(t, []string{rec.Devices[0].UUID}, rec.MPS.Devices, "serving the MIG device")
		require.True(t, strings.HasPrefix(rec.Devices[0].UUID, "MIG-"), rec.Devices[0].UUID)
		require.Contains(t, e.spec(uid), "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=5120M")
		claims = append(claims, c)
	}
	require.Len(t, m.holders(dev), 2)
	for _, c := range claims {
		require.NoError(t, m.Unprepare(ctx(t), ref(c)))
	}
	require.Empty(t, m.holders(dev))
}
