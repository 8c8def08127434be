package plugin

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpudra/gpudra/internal/plugin/cdi"
	"github.com/gpudra/gpudra/internal/plugin/nvmllib"
)

// TestRealNVML runs discovery, slice building and CDI edit discovery against
// the node's real NVIDIA driver. It is skipped where no driver is installed
// (CI, laptops); on a GPU node it is the end-to-end check of the real path.
// GPUDRA_REQUIRE_GPU=1 turns the skip into a failure.
func TestRealNVML(t *testing.T) {
	if _, err := nvmllib.FindLibrary(driverRoot()); err != nil {
		if os.Getenv("GPUDRA_REQUIRE_GPU") == "1" {
			t.Fatalf("GPUDRA_REQUIRE_GPU=1 but no NVIDIA driver: %v", err)
		}
		t.Skipf("no NVIDIA driver on this machine: %v", errors.Unwrap(err))
	}
	_, ctx := ktesting.NewTestContext(t)
	o := testOptions(t)
	o.NvidiaDriverRoot = driverRoot()
	ins, err := Inspect(ctx, o)
	require.NoError(t, err)
	require.NotEmpty(t, ins.Node.GPUs, "NVML found no GPU")
	require.NotEmpty(t, ins.Node.DriverVersion)
	for _, g := range ins.Node.GPUs {
		require.True(t, strings.HasPrefix(g.UUID, "GPU-"), g.UUID)
		require.NotEmpty(t, g.ProductName)
		require.NotZero(t, g.MemoryBytes)
		t.Logf("%s: %s %s, %d MiB, cc %s, bus %s, pcieRoot %q, numa %v, MIG capable %v enabled %v",
			g.DeviceName(), g.UUID, g.ProductName, g.MemoryBytes>>20, g.CUDAComputeCapability, g.PCIBusID, g.PCIeRoot, g.NUMANode, g.MIGCapable, g.MIGEnabled)
	}
	require.Len(t, ins.ResourceSlices[0].Spec.Devices, len(ins.Node.GPUs))

	gpus, err := OpenNode(ctx, o)
	require.NoError(t, err)
	defer gpus.Close()
	edits, err := gpus.Edits(ctx, o)
	require.NoError(t, err, "nvcdi must describe the driver's files")
	common, err := edits.Common()
	require.NoError(t, err)
	t.Logf("nvcdi common edits: %d device nodes, %d mounts, %d hooks, %d env", len(common.DeviceNodes), len(common.Mounts), len(common.Hooks), len(common.Env))
	w, err := cdi.NewWriter(t.TempDir(), edits)
	require.NoError(t, err)
	g := &gpus.Node.GPUs[0]
	_, err = w.WriteClaim("00000000-0000-0000-0000-000000000001", []cdi.ClaimDevice{{DeviceName: g.DeviceName(), GPU: g, RequestUUIDs: []string{g.UUID}}})
	require.NoError(t, err, "a claim spec with the real edits must be valid CDI")
}

func driverRoot() string {
	if r := os.Getenv("NVIDIA_DRIVER_ROOT"); r != "" {
		return r
	}
	return "/"
}
