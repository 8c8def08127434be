package prepare

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
)

// recordingModes stands in for NVML's compute mode: GPUs start in DEFAULT.
type recordingModes struct {
	mu    sync.Mutex
	mode  map[string]nvml.ComputeMode
	sets  int
	fail  error // answered by SetComputeMode
	readE error // answered by ComputeMode
}

func (r *recordingModes) ComputeMode(_ context.Context, uuid string) (nvml.ComputeMode, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.readE != nil {
		return 0, r.readE
	}
	return r.mode[uuid], nil
}

func (r *recordingModes) SetComputeMode(_ context.Context, uuid string, mode nvml.ComputeMode) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return r.fail
	}
	r.sets++
	r.mode[uuid] = mode
	return nil
}

func (r *recordingModes) get(uuid string) nvml.ComputeMode {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mode[uuid]
}

func (r *recordingModes) setCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sets
}

func (r *recordingModes) setFail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fail = err
}

// TestComputeMode: a whole GPU is in the mode its claim's use needs while
// the claim is prepared (EXCLUSIVE_PROCESS for MPS, DEFAULT for time
// slicing), and back in the mode it had before once the claim is gone; a
// GPU already in the needed mode and a claim that needs none leave it
// alone. (Before, the plugin set EXCLUSIVE_PROCESS for MPS only and always
// restored DEFAULT.)
func TestComputeMode(t *testing.T) {
	const (
		def  = nvml.COMPUTEMODE_DEFAULT
		excl = nvml.COMPUTEMODE_EXCLUSIVE_PROCESS
		proh = nvml.COMPUTEMODE_PROHIBITED
	)
	for name, tc := range map[string]struct {
		config   string
		before   nvml.ComputeMode
		during   nvml.ComputeMode
		wantSets int // SetComputeMode calls, prepare and unprepare
	}{
		"MPS on a DEFAULT GPU":              {config: `{"strategy":"MPS"}`, before: def, during: excl, wantSets: 2},
		"MPS on a PROHIBITED GPU":           {config: `{"strategy":"MPS"}`, before: proh, during: excl, wantSets: 2},
		"MPS on an EXCLUSIVE_PROCESS GPU":   {config: `{"strategy":"MPS"}`, before: excl, during: excl},
		"time slicing on an EXCLUSIVE GPU":  {config: `{"strategy":"TimeSlicing"}`, before: excl, during: def, wantSets: 2},
		"time slicing on a DEFAULT GPU":     {config: `{"strategy":"TimeSlicing","timeSlicing":{"interval":"Long"}}`, before: def, during: def},
		"exclusive leaves it alone":         {config: `{"strategy":"Exclusive"}`, before: excl, during: excl},
		"exclusive leaves PROHIBITED alone": {config: `{"strategy":"Exclusive"}`, before: proh, during: proh},
		"MPS on a GPU in EXCLUSIVE_THREAD":  {config: `{"strategy":"MPS"}`, before: nvml.COMPUTEMODE_EXCLUSIVE_THREAD, during: excl, wantSets: 2},
		"time slicing on a PROHIBITED GPU":  {config: `{"strategy":"TimeSlicing"}`, before: proh, during: def, wantSets: 2},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, 2)
			gpu := e.node.GPUs[0].UUID
			e.modes = &recordingModes{mode: map[string]nvml.ComputeMode{gpu: tc.before}}
			m, _ := e.manager()
			c := configured(uidA, "c", []alloc{{request: "gpu", device: "gpu-0"}}, tc.config)
			_, err := m.Prepare(ctx(t), c)
			require.NoError(t, err)
			require.Equal(t, tc.during, e.modes.get(gpu), "while prepared")
			require.NoError(t, m.Unprepare(ctx(t), ref(c)))
			require.Equal(t, tc.before, e.modes.get(gpu), "after unprepare")
			require.Equal(t, tc.wantSets, e.modes.setCount())
			require.NoFileExists(t, m.computeModeMarker("gpu-0"))
		})
	}
}

// TestComputeModeRestoreSurvives: a restore that fails keeps the marker
// and does not fail the unprepare; a plugin restart between prepare and
// unprepare keeps the mode, and the unprepare of the new process restores
// what the GPU had.
func TestComputeModeRestoreSurvives(t *testing.T) {
	for name, tc := range map[string]struct {
		restart     bool // restart between prepare and unprepare
		failRestore bool
	}{
		"restore fails, retried at start-up":    {failRestore: true},
		"restart between prepare and unprepare": {restart: true},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, 2)
			gpu := e.node.GPUs[0].UUID
			e.modes = &recordingModes{mode: map[string]nvml.ComputeMode{gpu: nvml.COMPUTEMODE_PROHIBITED}}
			m, _ := e.manager()
			c := configured(uidA, "c", []alloc{{request: "gpu", device: "gpu-0"}}, `{"strategy":"MPS"}`)
			_, err := m.Prepare(ctx(t), c)
			require.NoError(t, err)
			if tc.restart {
				m, _ = e.manager()
				require.Equal(t, nvml.COMPUTEMODE_EXCLUSIVE_PROCESS, e.modes.get(gpu), "kept while prepared")
			}
			if tc.failRestore {
				e.modes.setFail(nvml.ERROR_GPU_IS_LOST)
			}
			require.NoError(t, m.Unprepare(ctx(t), ref(c)))
			if tc.failRestore {
				require.Equal(t, nvml.COMPUTEMODE_EXCLUSIVE_PROCESS, e.modes.get(gpu))
				require.FileExists(t, m.computeModeMarker("gpu-0"))
				e.modes.setFail(nil)
				m, _ = e.manager()
			}
			require.Equal(t, nvml.COMPUTEMODE_PROHIBITED, e.modes.get(gpu), "the mode from before restored")
			require.NoFileExists(t, m.computeModeMarker("gpu-0"))
		})
	}
}

// TestComputeModeOldMarker: a marker of the previous version (the UUID
// only, EXCLUSIVE_PROCESS set on a DEFAULT GPU) is restored to DEFAULT.
func TestComputeModeOldMarker(t *testing.T) {
	e := newEnv(t, 2)
	gpu := e.node.GPUs[0].UUID
	e.modes = &recordingModes{mode: map[string]nvml.ComputeMode{gpu: nvml.COMPUTEMODE_EXCLUSIVE_PROCESS}}
	m, _ := e.manager()
	require.NoError(t, os.WriteFile(m.computeModeMarker("gpu-0"), []byte(gpu+"\n"), 0o600))
	m, _ = e.manager()
	require.Equal(t, nvml.COMPUTEMODE_DEFAULT, e.modes.get(gpu))
	require.NoFileExists(t, m.computeModeMarker("gpu-0"))
}

// TestComputeModeSetFails: a GPU whose mode cannot be set fails the
// prepare with what to fix, and keeps the mode it had.
func TestComputeModeSetFails(t *testing.T) {
	for name, tc := range map[string]struct {
		setErr, readErr error
		want            string
	}{
		"no permission":  {setErr: nvml.ERROR_NO_PERMISSION, want: "must run as root"},
		"not supported":  {setErr: nvml.ERROR_NOT_SUPPORTED, want: "does not let its compute mode be changed"},
		"unreadable GPU": {readErr: nvml.ERROR_GPU_IS_LOST, want: "does not answer"},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, 2)
			gpu := e.node.GPUs[0].UUID
			e.modes = &recordingModes{mode: map[string]nvml.ComputeMode{}, readE: tc.readErr}
			m, _ := e.manager()
			e.modes.setFail(tc.setErr)
			c := configured(uidA, "c", []alloc{{request: "gpu", device: "gpu-0"}}, `{"strategy":"MPS"}`)
			_, err := m.Prepare(ctx(t), c)
			require.Error(t, err)
			require.ErrorContains(t, err, "EXCLUSIVE_PROCESS")
			require.ErrorContains(t, err, tc.want)
			require.Equal(t, nvml.COMPUTEMODE_DEFAULT, e.modes.get(gpu))
			require.NoFileExists(t, m.computeModeMarker("gpu-0"))
		})
	}
}

// TestComputeModeOfShares: consumable shares run their own MPS servers,
// which need DEFAULT: the first share sets it, the last one to go restores
// what the GPU had.
func TestComputeModeOfShares(t *testing.T) {
	e := newEnv(t, 2)
	gpu := e.node.GPUs[0].UUID
	e.modes = &recordingModes{mode: map[string]nvml.ComputeMode{gpu: nvml.COMPUTEMODE_EXCLUSIVE_PROCESS}}
	m, _ := e.manager()
	var shares []*resourceapi.ResourceClaim
	for i, uid := range []string{uidA, uidB} {
		s := shareClaim(uid, fmt.Sprintf("share-%d", i), "gpu-0", "1Gi", "")
		_, err := m.Prepare(ctx(t), s)
		require.NoError(t, err)
		require.Equal(t, nvml.COMPUTEMODE_DEFAULT, e.modes.get(gpu))
		shares = append(shares, s)
	}
	require.Equal(t, 1, e.modes.setCount(), "set once")
	require.NoError(t, m.Unprepare(ctx(t), ref(shares[0])))
	require.Equal(t, nvml.COMPUTEMODE_DEFAULT, e.modes.get(gpu), "kept for the other share")
	require.NoError(t, m.Unprepare(ctx(t), ref(shares[1])))
	require.Equal(t, nvml.COMPUTEMODE_EXCLUSIVE_PROCESS, e.modes.get(gpu), "restored by the last share")
}

// TestComputeModePendingRestore: a restore that failed is finished by the
// next claim on the GPU, whether it needs a mode (time slicing needs the
// DEFAULT the GPU had) or not (an exclusive claim restores it).
func TestComputeModePendingRestore(t *testing.T) {
	for name, next := range map[string]string{
		"time-sliced claim": `{"strategy":"TimeSlicing"}`,
		"exclusive claim":   `{"strategy":"Exclusive"}`,
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, 2)
			gpu := e.node.GPUs[0].UUID
			m, _ := e.manager()
			c := configured(uidA, "mps", []alloc{{request: "gpu", device: "gpu-0"}}, `{"strategy":"MPS"}`)
			_, err := m.Prepare(ctx(t), c)
			require.NoError(t, err)
			e.modes.setFail(nvml.ERROR_GPU_IS_LOST)
			require.NoError(t, m.Unprepare(ctx(t), ref(c)))
			require.FileExists(t, m.computeModeMarker("gpu-0"))
			e.modes.setFail(nil)

			c2 := configured(uidB, "next", []alloc{{request: "gpu", device: "gpu-0"}}, next)
			_, err = m.Prepare(ctx(t), c2)
			require.NoError(t, err)
			require.Equal(t, nvml.COMPUTEMODE_DEFAULT, e.modes.get(gpu))
			require.NoFileExists(t, m.computeModeMarker("gpu-0"), "nothing left to restore")
			require.NoError(t, m.Unprepare(ctx(t), ref(c2)))
			require.Equal(t, nvml.COMPUTEMODE_DEFAULT, e.modes.get(gpu))
		})
	}
}
