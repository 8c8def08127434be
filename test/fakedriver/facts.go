package fakedriver

import (
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/pkg/nvmllib/sim"
)

// nodeFacts is what the root is generated from, as the simulated NVML
// reports it: the generator repeats no fact of the profile itself.
type nodeFacts struct {
	DriverVersion string
	GPUs          []gpuFacts
}

type gpuFacts struct {
	Minor int
	UUID  string
	Name  string
	// BusID in the sysfs form "0000:1b:00.0".
	BusID string
	// NUMANode is -1 when unknown.
	NUMANode int
	// PCIeRoot such as "pci0000:15"; "" when the profile leaves it unknown.
	PCIeRoot   string
	MIGCapable bool
	// PCIDeviceID and PCISubsystemID in NVML's encoding: device<<16 | vendor.
	PCIDeviceID    uint32
	PCISubsystemID uint32
}

// readFacts asks a simulated NVML server for the profile on node what the
// root must contain.
func readFacts(p *sim.Profile, node string) (*nodeFacts, error) {
	srv := sim.NewServer(p, node)
	if ret := srv.Init(); ret != nvml.SUCCESS {
		return nil, nvmlErr("initialize the simulated NVML", ret)
	}
	defer func() { _ = srv.Shutdown() }()
	version, ret := srv.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		return nil, nvmlErr("get the driver version", ret)
	}
	f := &nodeFacts{DriverVersion: version}
	count, ret := srv.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, nvmlErr("get the GPU count", ret)
	}
	minors := map[int]bool{}
	for i := range count {
		dev, ret := srv.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, nvmlErr(fmt.Sprintf("get GPU %d", i), ret)
		}
		g, err := gpuFactsOf(dev)
		if err != nil {
			return nil, fmt.Errorf("GPU %d: %w", i, err)
		}
		if minors[g.Minor] {
			return nil, fmt.Errorf("GPU %d: minor number %d is used twice", i, g.Minor)
		}
		minors[g.Minor] = true
		g.PCIeRoot, _ = srv.PCIeRoot(g.BusID)
		f.GPUs = append(f.GPUs, g)
	}
	return f, nil
}

func gpuFactsOf(dev nvml.Device) (gpuFacts, error) {
	var g gpuFacts
	var ret nvml.Return
	if g.UUID, ret = dev.GetUUID(); ret != nvml.SUCCESS {
		return g, nvmlErr("get UUID", ret)
	}
	if g.Minor, ret = dev.GetMinorNumber(); ret != nvml.SUCCESS {
		return g, nvmlErr("get minor number", ret)
	}
	if g.Name, ret = dev.GetName(); ret != nvml.SUCCESS {
		return g, nvmlErr("get name", ret)
	}
	pci, ret := dev.GetPciInfo()
	if ret != nvml.SUCCESS {
		return g, nvmlErr("get PCI info", ret)
	}
	var err error
	if g.BusID, err = sysfsBusID(pci.BusId[:]); err != nil {
		return g, err
	}
	g.PCIDeviceID, g.PCISubsystemID = pci.PciDeviceId, pci.PciSubSystemId
	g.NUMANode = -1
	switch numa, ret := dev.GetNumaNodeId(); ret {
	case nvml.SUCCESS:
		g.NUMANode = numa
	case nvml.ERROR_NOT_SUPPORTED:
	default:
		return g, nvmlErr("get NUMA node", ret)
	}
	switch _, _, ret := dev.GetMigMode(); ret {
	case nvml.SUCCESS:
		g.MIGCapable = true
	case nvml.ERROR_NOT_SUPPORTED:
	default:
		return g, nvmlErr("get MIG mode", ret)
	}
	return g, nil
}

// sysfsBusID turns NVML's NUL-terminated "00000000:1B:00.0" into sysfs's
// "0000:1b:00.0".
func sysfsBusID(c []int8) (string, error) {
	var b strings.Builder
	for _, ch := range c {
		if ch == 0 {
			break
		}
		b.WriteByte(byte(ch))
	}
	s := b.String()
	var domain, bus, dev, fn uint32
	if n, err := fmt.Sscanf(s, "%x:%x:%x.%x", &domain, &bus, &dev, &fn); n != 4 || err != nil {
		return "", fmt.Errorf("NVML reported PCI bus ID %q, not domain:bus:device.function", s)
	}
	return fmt.Sprintf("%04x:%02x:%02x.%x", domain, bus, dev, fn), nil
}

func nvmlErr(what string, ret nvml.Return) error {
	return fmt.Errorf("simulated NVML: %s: %v", what, ret.Error())
}
