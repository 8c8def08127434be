package libtest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi"
	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/test/nvmlsim"
)

// TestNvcdiCalls runs NVIDIA's nvcdi (ModeNvml, as internal/plugin/cdi does) against
// the library for a GPU and a MIG device. The fake root here has no driver
// files, so nvcdi may fail to build specs (test/fakedriver provides them);
// what must hold is that every NVML call it makes exists and answers. The
// calls are traced (GPUDRA_SIM_NVML_TRACE) and logged.
func TestNvcdiCalls(t *testing.T) {
	root := newRoot(t, staticMIG)
	trace := filepath.Join(t.TempDir(), "trace")
	t.Setenv(nvmlsim.TraceEnv, trace)
	lib := open(t, root)

	gpu, ret := lib.DeviceGetHandleByIndex(0)
	ok(t, ret)
	gpuUUID, ret := gpu.GetUUID()
	ok(t, ret)
	migDev, ret := gpu.GetMigDeviceHandleByIndex(0)
	ok(t, ret)
	migUUID, ret := migDev.GetUUID()
	ok(t, ret)

	before, err := os.ReadFile(trace)
	require.NoError(t, err)
	cdi, err := nvcdi.New(nvcdi.WithNvmlLib(lib), nvcdi.WithMode(nvcdi.ModeNvml),
		nvcdi.WithDriverRoot(root), nvcdi.WithDevRoot(root))
	require.NoError(t, err)
	for _, id := range []string{gpuUUID, migUUID} {
		specs, err := cdi.GetDeviceSpecsByID(id)
		t.Logf("GetDeviceSpecsByID(%s): %d specs, error: %v", id, len(specs), err)
	}
	_, err = cdi.GetCommonEdits()
	t.Logf("GetCommonEdits: error: %v", err)

	data, err := os.ReadFile(trace)
	require.NoError(t, err)
	count, ret := lib.DeviceGetCount()
	ok(t, ret, "the library still answers")
	require.Equal(t, 2, count)

	var calls []string
	for _, line := range strings.Split(strings.TrimSpace(string(data[len(before):])), "\n") {
		calls = append(calls, strings.TrimPrefix(line, "nvml "))
	}
	slices.Sort(calls)
	calls = slices.Compact(calls)
	t.Logf("NVML calls of nvcdi and go-nvlib:\n  %s", strings.Join(calls, "\n  "))
	for _, want := range []string{"nvmlDeviceGetHandleByUUID", "nvmlDeviceIsMigDeviceHandle", "nvmlDeviceGetMinorNumber"} {
		require.Contains(t, calls, want)
	}
	for _, c := range calls {
		require.NotContains(t, c, "(not simulated)", "nvcdi's path is simulated end to end; update the README's list if this is fine")
	}
}
