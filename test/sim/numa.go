package sim

// maxNUMANodesPerSocket bounds a profile's sub-NUMA clustering (SNC-4 is
// the most that x86 servers offer).
const maxNUMANodesPerSocket = 4

// SLIT distances of the simulated host (ACPI SLIT, as
// /sys/devices/system/node/node<N>/distance lists them): a node to itself,
// to a node of the same socket (sub-NUMA clustering) and to one of another
// socket. Typical of two-socket x86 servers; the plugin only compares them.
const (
	distanceSelf       = 10
	distanceSameSocket = 12
	distanceRemote     = 21
)

// NUMATopology is the simulated host's NUMA layout, as sysfs shows it to the
// plugin (test/fakedriver writes it into the driver root's sys/).
type NUMATopology struct {
	// Distances[i][j] is the SLIT distance from node i to node j.
	Distances [][]int
	// Socket[i] is the CPU socket (physical package) of node i.
	Socket []int
}

// NUMATopology returns the NUMA nodes of the profile's host: enough whole
// sockets of NUMANodesPerSocket nodes each to hold every GPU's PCI NUMA node
// (PCINUMANode; Grace GPUs' memory nodes are not modelled as nodes here).
func (s *Server) NUMATopology() NUMATopology {
	per := max(s.profile.NUMANodesPerSocket, 1)
	highest := 0
	for _, g := range s.profile.GPUs {
		if n, ok := s.PCINUMANode(g.PCIBusID); ok && n > highest {
			highest = n
		}
	}
	nodes := (highest/per + 1) * per
	t := NUMATopology{Distances: make([][]int, nodes), Socket: make([]int, nodes)}
	for i := range nodes {
		t.Socket[i] = i / per
		t.Distances[i] = make([]int, nodes)
		for j := range nodes {
			switch {
			case i == j:
				t.Distances[i][j] = distanceSelf
			case i/per == j/per:
				t.Distances[i][j] = distanceSameSocket
			default:
				t.Distances[i][j] = distanceRemote
			}
		}
	}
	return t
}
