package gpuverify

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/test/fakedriver"
	"github.com/gpudra/gpudra/test/nvmlmem"
	"github.com/gpudra/gpudra/test/sim"
)

// TestMain makes this test binary step 9's child, as the kit's binary is
// (SelfFootprint).
func TestMain(m *testing.M) {
	nvmlmem.RunChild()
	os.Exit(m.Run())
}

// TestFakeDriverRoot runs the kit exactly as the binary does
// (ForDriverRoot: libnvidia-ml.so.1 dlopened from the driver root, nvcdi
// over it) on a fake driver root with the simulated libnvidia-ml. It needs
// that library: the test/nvmlsim/lib package in this tree, or a built one
// named by $GPUDRA_SIM_NVML_LIBRARY (make sim-nvml-lib); and root, for the
// root's device nodes.
func TestFakeDriverRoot(t *testing.T) {
	if _, err := os.Stat(filepath.Join("..", "nvmlsim", "lib")); err != nil && os.Getenv(fakedriver.LibraryEnv) == "" {
		t.Skipf("no simulated libnvidia-ml: test/nvmlsim/lib is missing and $%s is unset", fakedriver.LibraryEnv)
	}
	if os.Geteuid() != 0 {
		t.Skip("a fake driver root has device nodes: run as root")
	}
	// One root per process: the dynamic loader keeps the first library
	// named libnvidia-ml.so.1 it loaded, and with it the first root.
	root := fakedriver.ForTest(t, "../../internal/plugin/slice/testdata/static-mig.yaml", "verify-node")
	hook := filepath.Join(t.TempDir(), "nvidia-cdi-hook")
	require.NoError(t, os.WriteFile(hook, []byte("#!/bin/sh\nexit 0\n"), 0o755))
	cfg := ForDriverRoot(root, hook)
	cfg.NodeName, cfg.DriverName = "verify-node", "gpu.gpudra.io"
	cfg.Watch, cfg.ProbeInterval, cfg.TempDir = time.Second, 300*time.Millisecond, t.TempDir()
	r := &simRun{t: t, cfg: cfg}
	rep, text := r.run()
	require.Empty(t, failures(rep))
	require.Contains(t, rep.Library, filepath.Join(root, "usr/lib/x86_64-linux-gnu/libnvidia-ml.so."))
	require.Contains(t, text, "gpu-0 skipped: MIG mode is enabled")
	require.Len(t, rep.Claims, 1)
	// Step 6 through the dlopened library: every read-only row it checks
	// is answered as the table's real column says; the GPU in MIG mode
	// answers the utilization query NOT_SUPPORTED, which the row allows.
	require.NotNil(t, rep.Fidelity)
	require.Zero(t, rep.Fidelity.Corrections)
	require.Greater(t, rep.Fidelity.RowsChecked, 20)
	require.Contains(t, text, "nvmlDeviceGetUtilizationRates [all]: NOT_SUPPORTED on GPU 0, differs from the simulator's SUCCESS")
	// Step 7: the root's nvidia-smi, started with only the root's
	// libnvidia-ml preloaded, lists the GPUs.
	require.Contains(t, text, filepath.Join(root, "usr/bin/nvidia-smi")+" -L with [LD_PRELOAD=")
	// Step 8 reads, through the plugin's vfio.HostSysfs, the fake root's
	// sysfs: both GPUs on nvidia with driver_override unset, in IOMMU groups.
	require.Contains(t, text, "0000:1b:00.0): bound to nvidia")
	require.Contains(t, text, "driver_override readable: \"\"")
	require.Regexp(t, `0000:1b:00.0\): IOMMU group \d+; `+regexp.QuoteMeta(root)+`/dev/vfio/\d+ `, text)
	require.Contains(t, text, "VFIO container device: "+filepath.Join(root, "dev/vfio/vfio"))
	// Step 9 measured the root's library in two children of this binary.
	require.NotNil(t, rep.Memory)
	require.Equal(t, rep.Library, rep.Memory.Library)
	require.Equal(t, 2, rep.Memory.GPUs)
	require.Positive(t, rep.Memory.RSS)
	require.Positive(t, rep.Memory.Mapped)
	require.Contains(t, text, "initialised with its 2 GPUs read, adds ")
	// The simulated library keeps the GPUs' MIG state in the root: after the
	// run it holds exactly the MIG devices discovered at its start.
	st, err := sim.ReadState(filepath.Join(root, fakedriver.StateFile))
	require.NoError(t, err)
	var discovered, now []string
	for _, d := range rep.Inspection.Node.GPUs[0].MIGDevices {
		discovered = append(discovered, d.UUID)
	}
	for _, gi := range st.GPUs[0].GPUInstances {
		for _, ci := range gi.ComputeInstances {
			now = append(now, ci.UUID)
		}
	}
	require.Len(t, discovered, 4)
	require.ElementsMatch(t, discovered, now, "MIG devices unchanged")
	require.True(t, st.GPUs[0].MIGEnabled)
	require.False(t, st.GPUs[1].MIGEnabled, "MIG mode unchanged")
}
