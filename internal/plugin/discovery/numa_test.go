package discovery

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/test/sim"
)

// simOnly hides the simulator's topology shortcuts (PCIeRoot,
// PCINUMANode): discovery then reads sysfs, as on a real node.
type simOnly struct{ nvml.Interface }

// numaProfile is one GPU at 0000:17:00.0 whose model answers
// nvmlDeviceGetNumaNodeId as numaNodeID says (capabilities.go in test/sim).
func numaProfile(t *testing.T, numaNodeID string) *sim.Server {
	t.Helper()
	p, err := sim.Parse([]byte(`name: numa
driverVersion: "570.124.06"
cudaDriverVersion: "12.8"
models:
  - name: numa-gpu
    productName: NVIDIA NUMA
    architecture: Hopper
    computeCapability: "9.0"
    memory: 80Gi
    pciDeviceID: 0x233010DE
    nvml: {numaNodeId: ` + numaNodeID + `}
gpus:
  - {model: numa-gpu, pciBusID: "0000:17:00.0", numaNode: 0}
`))
	require.NoError(t, err)
	s := sim.NewServer(p, "n")
	require.Equal(t, nvml.SUCCESS, s.Init())
	t.Cleanup(func() { _ = s.Shutdown() })
	return s
}

// The numaNode attribute comes from the PCI device's numa_node in sysfs,
// as NVIDIA's driver reads it, never from nvmlDeviceGetNumaNodeId: on x86
// that answers NOT_SUPPORTED, on Grace it names the GPU memory's node.
func TestDiscoverNUMANodeFromSysfs(t *testing.T) {
	one, zero := 1, 0
	for name, tc := range map[string]struct {
		numaNodeID string
		sysfs      string // numa_node's content; "" : no file
		want       *int
	}{
		"x86: sysfs names the node":                 {"not-supported", "1\n", &one},
		"x86: node 0":                               {"not-supported", "0\n", &zero},
		"x86: the firmware publishes no affinity":   {"not-supported", "-1\n", nil},
		"x86: no sysfs entry":                       {"not-supported", "", nil},
		"x86: garbage":                              {"not-supported", "many\n", nil},
		"grace: the CPU node, not the GPU memory's": {"gpu-memory", "0\n", &zero},
		"grace: no affinity, NVML's node not used":  {"gpu-memory", "-1\n", nil},
	} {
		t.Run(name, func(t *testing.T) {
			srv := numaProfile(t, tc.numaNodeID)
			sys := t.TempDir()
			dir := filepath.Join(sys, "bus", "pci", "devices", "0000:17:00.0")
			require.NoError(t, os.MkdirAll(dir, 0o755))
			if tc.sysfs != "" {
				require.NoError(t, os.WriteFile(filepath.Join(dir, "numa_node"), []byte(tc.sysfs), 0o444))
			}
			node, err := Discover(context.Background(), simOnly{srv}, Options{SysfsRoot: sys})
			require.NoError(t, err)
			require.Empty(t, node.Unavailable)
			require.Len(t, node.GPUs, 1)
			require.Equal(t, tc.want, node.GPUs[0].NUMANode)
		})
	}
}

// With the simulator's own topology (no sysfs), the node is the profile's
// numaNode, what the fake driver root writes into sysfs.
func TestDiscoverNUMANodeFromSimulator(t *testing.T) {
	srv := numaProfile(t, "gpu-memory")
	node, err := Discover(context.Background(), srv, Options{SysfsRoot: t.TempDir()})
	require.NoError(t, err)
	require.Len(t, node.GPUs, 1)
	require.NotNil(t, node.GPUs[0].NUMANode)
	require.Equal(t, 0, *node.GPUs[0].NUMANode)
}
