package prepare

import (
	"context"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// recordingModes stands in for NVML's compute mode.
type recordingModes struct {
	mu        sync.Mutex
	exclusive map[string]bool
	fail      error
}

func (r *recordingModes) SetComputeMode(_ context.Context, uuid string, exclusive bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return r.fail
	}
	r.exclusive[uuid] = exclusive
	return nil
}

func (r *recordingModes) get(uuid string) (exclusive, set bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	exclusive, set = r.exclusive[uuid]
	return exclusive, set
}

// TestComputeModeOfMPSClaims: an MPS claim's whole GPUs are in
// EXCLUSIVE_PROCESS while it is prepared and DEFAULT after; a restore that
// fails is tried again at the next start; shares and other strategies never
// set it.
func TestComputeModeOfMPSClaims(t *testing.T) {
	for name, tc := range map[string]struct {
		config        string
		wantExclusive bool
	}{
		"MPS":          {config: `{"strategy":"MPS"}`, wantExclusive: true},
		"time slicing": {config: `{"strategy":"TimeSlicing"}`},
		"exclusive":    {config: `{"strategy":"Exclusive"}`},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, 2)
			m, _ := e.manager()
			gpu := e.node.GPUs[0].UUID
			c := configured(uidA, "c", []alloc{{request: "gpu", device: "gpu-0"}}, tc.config)
			_, err := m.Prepare(ctx(t), c)
			require.NoError(t, err)
			excl, set := e.modes.get(gpu)
			require.Equal(t, tc.wantExclusive, excl && set)
			if !tc.wantExclusive {
				require.False(t, set, "the compute mode is left alone")
				return
			}
			// A GPU that does not answer keeps EXCLUSIVE_PROCESS and its
			// marker; the unprepare succeeds all the same.
			e.modes.fail = syscall.EIO
			require.NoError(t, m.Unprepare(ctx(t), ref(c)))
			excl, _ = e.modes.get(gpu)
			require.True(t, excl)
			require.FileExists(t, m.computeModeMarker("gpu-0"))

			// The next start restores DEFAULT.
			e.modes.fail = nil
			m2, _ := e.manager()
			excl, _ = e.modes.get(gpu)
			require.False(t, excl, "DEFAULT restored at start-up")
			require.NoFileExists(t, m2.computeModeMarker("gpu-0"))
		})
	}
}
