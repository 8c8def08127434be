package fakedriver

import (
	"context"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/uuid"

	"github.com/gpudra/gpudra/internal/plugin/discovery"
	"github.com/gpudra/gpudra/test/sim"
)

// nodeFacts is what the root is generated from, as the simulated NVML
// reports it: the generator repeats no fact of the profile itself.
type nodeFacts struct {
	DriverVersion string
	GPUs          []gpuFacts
	// NUMA is the host's NUMA layout (sys/devices/system/node).
	NUMA sim.NUMATopology
}

type gpuFacts struct {
	Minor int
	UUID  string
	Name  string
	// BusID in the sysfs form "0000:1b:00.0".
	BusID string
	// NUMANode of the PCI device (sysfs numa_node); -1 when unknown.
	NUMANode int
	// PCIeRoot such as "pci0000:15"; "" when the profile leaves it unknown.
	PCIeRoot   string
	MIGCapable bool
	// PCIDeviceID and PCISubsystemID in NVML's encoding: device<<16 | vendor.
	PCIDeviceID    uint32
	PCISubsystemID uint32
	// RackFabric: the profile puts the GPU in a multi-node NVLink fabric
	// (a fabric entry with a cluster UUID), whatever the state of its
	// registration: the driver's IMEX support does not wait for the
	// Fabric Manager.
	RackFabric bool
}

// readFacts asks a simulated NVML server for the profile on node what the
// root must contain: what the plugin's discovery reports (internal/plugin/discovery, the
// same reader of NVML), plus the PCI device IDs that sysfs shows.
func readFacts(p *sim.Profile, node string) (*nodeFacts, error) {
	srv := sim.NewServer(p, node)
	if ret := srv.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("simulated NVML: initialize: %v", ret.Error())
	}
	defer func() { _ = srv.Shutdown() }()
	n, err := discovery.Discover(context.Background(), srv, discovery.Options{})
	if err != nil {
		return nil, fmt.Errorf("simulated NVML: %w", err)
	}
	if len(n.Unavailable) > 0 {
		return nil, fmt.Errorf("simulated NVML: GPU %d does not answer: %s", n.Unavailable[0].Index, n.Unavailable[0].Error)
	}
	f := &nodeFacts{DriverVersion: n.DriverVersion, NUMA: srv.NUMATopology()}
	minors := map[int]bool{}
	rack := map[int]bool{}
	for _, g := range p.GPUs {
		rack[g.Index] = g.Fabric != nil && g.Fabric.ClusterUUID != uuid.Nil && g.Fabric.State != nvml.GPU_FABRIC_STATE_NOT_SUPPORTED
	}
	for _, g := range n.GPUs {
		if minors[g.Minor] {
			return nil, fmt.Errorf("GPU %d: minor number %d is used twice", g.Index, g.Minor)
		}
		minors[g.Minor] = true
		dev, _ := srv.DeviceGetHandleByIndex(g.Index)
		pci, ret := dev.GetPciInfo()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("simulated NVML: GPU %d: get PCI info: %v", g.Index, ret.Error())
		}
		// NVML does not report the PCI device's NUMA node on x86 (it
		// answers NOT_SUPPORTED); sysfs does, and the simulator says what.
		numa, _ := srv.PCINUMANode(g.PCIBusID)
		f.GPUs = append(f.GPUs, gpuFacts{Minor: g.Minor, UUID: g.UUID, Name: g.ProductName, BusID: g.PCIBusID,
			NUMANode: numa, PCIeRoot: g.PCIeRoot, MIGCapable: g.MIGCapable,
			PCIDeviceID: pci.PciDeviceId, PCISubsystemID: pci.PciSubSystemId, RackFabric: rack[g.Index]})
	}
	return f, nil
}

// busIDs are the GPUs' PCI addresses in discovery order.
func (f *nodeFacts) busIDs() []string {
	out := make([]string, 0, len(f.GPUs))
	for _, g := range f.GPUs {
		out = append(out, g.BusID)
	}
	return out
}
