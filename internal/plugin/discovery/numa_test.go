package discovery

import (
	"context"
	"fmt"
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

// TestDiscoverNUMANeighbours: the GPU's NUMA neighbours are the nodes of its
// socket at the smallest SLIT distance, read from sysfs: with sub-NUMA
// clustering the socket's other node, without it none, and none where sysfs
// has no distances.
func TestDiscoverNUMANeighbours(t *testing.T) {
	snc2 := map[int]string{0: "10 12 21 21", 1: "12 10 21 21", 2: "21 21 10 12", 3: "21 21 12 10"}
	for name, tc := range map[string]struct {
		numa      string
		distances map[int]string
		sockets   []int // of nodes 0.. (one CPU each)
		want      []int
	}{
		"SNC-2, GPU on node 1":     {numa: "1", distances: snc2, sockets: []int{0, 0, 1, 1}, want: []int{0}},
		"SNC-2, GPU on node 2":     {numa: "2", distances: snc2, sockets: []int{0, 0, 1, 1}, want: []int{3}},
		"two sockets, no SNC":      {numa: "1", distances: map[int]string{0: "10 21", 1: "21 10"}, sockets: []int{0, 1}},
		"no distances in sysfs":    {numa: "1"},
		"no affinity: no numaNode": {numa: "-1", distances: snc2, sockets: []int{0, 0, 1, 1}},
	} {
		t.Run(name, func(t *testing.T) {
			srv := numaProfile(t, "not-supported")
			sys := t.TempDir()
			dir := filepath.Join(sys, "bus", "pci", "devices", "0000:17:00.0")
			require.NoError(t, os.MkdirAll(dir, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "numa_node"), []byte(tc.numa+"\n"), 0o444))
			for n, d := range tc.distances {
				nd := filepath.Join(sys, "devices", "system", "node", fmt.Sprintf("node%d", n))
				require.NoError(t, os.MkdirAll(nd, 0o755))
				require.NoError(t, os.WriteFile(filepath.Join(nd, "distance"), []byte(d+"\n"), 0o444))
				require.NoError(t, os.WriteFile(filepath.Join(nd, "cpulist"), fmt.Appendf(nil, "%d\n", n), 0o444))
				cd := filepath.Join(sys, "devices", "system", "cpu", fmt.Sprintf("cpu%d", n), "topology")
				require.NoError(t, os.MkdirAll(cd, 0o755))
				require.NoError(t, os.WriteFile(filepath.Join(cd, "physical_package_id"), fmt.Appendf(nil, "%d\n", tc.sockets[n]), 0o444))
			}
			node, err := Discover(context.Background(), simOnly{srv}, Options{SysfsRoot: sys})
			require.NoError(t, err)
			require.Len(t, node.GPUs, 1)
			require.Equal(t, tc.want, node.GPUs[0].NUMANeighbours)
		})
	}
}
