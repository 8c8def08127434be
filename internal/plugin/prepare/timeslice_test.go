package prepare

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/api/v1alpha1"
)

var errGPULost = errors.New("nvidia-smi: Unable to determine the device handle for GPU: GPU is lost. Reboot the system to recover this GPU")

// A time-sliced pod whose GPU fell off the bus must not stay Terminating:
// unprepare releases the claim, and the default time slice is restored once
// the GPU answers again — at the next start, or when the next claim on the
// GPU is prepared or unprepared.
func TestUnprepareOnALostGPU(t *testing.T) {
	tests := []struct {
		name string
		// retry brings the GPU back and has the restore retried.
		retry func(t *testing.T, e *env, m *Manager)
	}{
		{"at the next start", func(t *testing.T, e *env, _ *Manager) {
			e.slicer.setLost(e.node.GPUs[0].UUID, nil)
			e.manager()
		}},
		{"by the next prepare on the GPU", func(t *testing.T, e *env, m *Manager) {
			e.slicer.setLost(e.node.GPUs[0].UUID, nil)
			_, err := m.Prepare(ctx(t), gpuClaim(uidB, "next", "gpu-0"))
			require.NoError(t, err)
		}},
		{"by the next unprepare on the GPU", func(t *testing.T, e *env, m *Manager) {
			next := gpuClaim(uidB, "next", "gpu-0")
			_, err := m.Prepare(ctx(t), next)
			require.NoError(t, err, "a GPU whose time slice could not be restored is still usable")
			require.FileExists(t, m.timeSliceMarker("gpu-0"))
			e.slicer.setLost(e.node.GPUs[0].UUID, nil)
			require.NoError(t, m.Unprepare(ctx(t), ref(next)))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 1)
			m, _ := e.manager()
			gpu := e.node.GPUs[0].UUID
			a := configured(uidA, "a", []alloc{{request: "gpu", device: "gpu-0"}}, longSlice)
			_, err := m.Prepare(ctx(t), a)
			require.NoError(t, err)

			e.slicer.setLost(gpu, errGPULost)
			require.NoError(t, m.Unprepare(ctx(t), ref(a)), "unprepare does not depend on a lost GPU")
			rec, err := m.cfg.Checkpoints.Get(uidA)
			require.NoError(t, err)
			require.Nil(t, rec)
			require.Empty(t, m.holders("gpu-0"))
			specs, err := m.cfg.CDI.ListClaims()
			require.NoError(t, err)
			require.Empty(t, specs)
			require.FileExists(t, m.timeSliceMarker("gpu-0"), "the restore is retried later")
			require.Equal(t, v1alpha1.LongTimeSlice, e.slicer.get(gpu))

			tc.retry(t, e, m)
			require.Equal(t, v1alpha1.DefaultTimeSlice, e.slicer.get(gpu))
			require.NoFileExists(t, m.timeSliceMarker("gpu-0"))
		})
	}
}

// The kubelet's deadline passing in the middle of a prepare or before an
// unprepare must not leave the cleanup half done: it runs under its own
// context.
func TestCleanupOutlivesTheKubeletsDeadline(t *testing.T) {
	e := newEnv(t, 2)
	m, _ := e.manager()
	gpu0, gpu1 := e.node.GPUs[0].UUID, e.node.GPUs[1].UUID
	two := configured(uidA, "two", []alloc{{request: "gpu", device: "gpu-0"}, {request: "gpu", device: "gpu-1"}}, longSlice)
	requireGone := func(t *testing.T) {
		t.Helper()
		rec, err := m.cfg.Checkpoints.Get(uidA)
		require.NoError(t, err)
		require.Nil(t, rec)
		require.Empty(t, m.holders("gpu-0"))
		require.Empty(t, m.holders("gpu-1"))
		specs, err := m.cfg.CDI.ListClaims()
		require.NoError(t, err)
		require.Empty(t, specs)
		for i, gpu := range []string{gpu0, gpu1} {
			require.NotEqual(t, v1alpha1.LongTimeSlice, e.slicer.get(gpu), "GPU %d", i)
		}
		require.NoFileExists(t, m.timeSliceMarker("gpu-0"))
		require.NoFileExists(t, m.timeSliceMarker("gpu-1"))
	}

	t.Run("rollback after the deadline passed mid-prepare", func(t *testing.T) {
		kubelet, cancel := context.WithCancel(ctx(t))
		defer cancel()
		// The deadline passes while nvidia-smi sets the second GPU.
		e.slicer.setBefore(func(uuid string) {
			if uuid == gpu1 {
				cancel()
			}
		})
		defer e.slicer.setBefore(nil)
		_, err := m.Prepare(kubelet, two)
		require.ErrorIs(t, err, context.Canceled)
		requireGone(t)
	})
	t.Run("unprepare after the deadline", func(t *testing.T) {
		_, err := m.Prepare(ctx(t), two)
		require.NoError(t, err)
		require.Equal(t, v1alpha1.LongTimeSlice, e.slicer.get(gpu0))
		expired, cancel := context.WithCancel(ctx(t))
		cancel()
		require.NoError(t, m.Unprepare(expired, ref(two)))
		requireGone(t)
	})
}

// A marker write that crashed leaves atomicfile's temp file in the lock
// directory; listing the markers skips it, so no restore is attempted for a
// device named after it.
func TestTimeSliceMarkersSkipTempFiles(t *testing.T) {
	e := newEnv(t, 1)
	m, _ := e.manager()
	require.NoError(t, m.markTimeSliced("gpu-0", e.node.GPUs[0].UUID, true))
	leftover := filepath.Join(m.cfg.LockDir, "."+filepath.Base(m.timeSliceMarker("gpu-0"))+".tmp-123")
	require.NoError(t, os.WriteFile(leftover, []byte(e.node.GPUs[0].UUID), 0o600))
	require.Equal(t, []string{"gpu-0"}, m.timeSliceMarkers(ctx(t)))
	fi, err := os.Stat(m.timeSliceMarker("gpu-0"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
}
