package fakedriver

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gpudra/gpudra/test/sim"
)

// proc writes the driver's /proc files (mig-minors, capabilities and
// proc/devices come with the device nodes).
func (w *writer) proc(f *nodeFacts) {
	w.file("proc/driver/nvidia/version", fmt.Appendf(nil,
		"NVRM version: NVIDIA UNIX x86_64 Kernel Module  %s  (simulated)\nGCC version:  none: a fake driver root of gpudra's test/fakedriver\n",
		f.DriverVersion), 0o444)
	for _, g := range f.GPUs {
		info := fmt.Sprintf("Model: \t\t %s\nIRQ:   \t\t 0\nGPU UUID: \t %s\nVideo BIOS: \t ??.??.??.??.??\nBus Type: \t PCIe\n"+
			"DMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t %s\nDevice Minor: \t %d\nGPU Excluded:\t No\n",
			g.Name, g.UUID, g.BusID, g.Minor)
		w.file(filepath.Join("proc/driver/nvidia/gpus", g.BusID, "information"), []byte(info), 0o444)
	}
}

// sys writes the PCI part of /sys that the plugin reads: each GPU under
// its PCIe root complex, behind a root port of its own, and linked from
// sys/bus/pci/devices, so that the PCIe root resolved from the link
// (k8s.io/dynamic-resource-allocation/deviceattribute) is the simulator's.
// A GPU whose profile leaves the root unknown gets a plain directory with
// only numa_node, under no root complex: the plugin then publishes no
// pcieRoot for it, as with the simulator, but its numaNode.
func (w *writer) sys(f *nodeFacts) {
	taken := map[string]bool{} // PCI addresses in use
	for _, g := range f.GPUs {
		taken[g.BusID] = true
	}
	for _, g := range f.GPUs {
		if g.PCIeRoot == "" {
			w.file(filepath.Join("sys/bus/pci/devices", g.BusID, "numa_node"), fmt.Appendf(nil, "%d\n", g.NUMANode), 0o444)
			continue
		}
		port, err := rootPort(g.PCIeRoot, taken)
		if err != nil {
			w.fail(fmt.Errorf("GPU %s: %w", g.BusID, err))
			return
		}
		taken[port] = true
		portDir := filepath.Join("devices", g.PCIeRoot, port) // relative to sys/
		gpuDir := filepath.Join(portDir, g.BusID)
		for name, value := range map[string]string{
			"vendor":           fmt.Sprintf("0x%04x", g.PCIDeviceID&0xffff),
			"device":           fmt.Sprintf("0x%04x", g.PCIDeviceID>>16),
			"subsystem_vendor": fmt.Sprintf("0x%04x", g.PCISubsystemID&0xffff),
			"subsystem_device": fmt.Sprintf("0x%04x", g.PCISubsystemID>>16),
			"class":            "0x030200", // 3D controller
			"numa_node":        fmt.Sprint(g.NUMANode),
		} {
			w.file(filepath.Join("sys", gpuDir, name), []byte(value+"\n"), 0o444)
		}
		w.file(filepath.Join("sys", portDir, "numa_node"), fmt.Appendf(nil, "%d\n", g.NUMANode), 0o444)
		w.symlink(filepath.Join("../../..", portDir), filepath.Join("sys/bus/pci/devices", port))
		w.symlink(filepath.Join("../../..", gpuDir), filepath.Join("sys/bus/pci/devices", g.BusID))
	}
}

// cpusPerNUMANode is how many CPUs each simulated NUMA node lists.
const cpusPerNUMANode = 2

// numa writes the host's NUMA nodes as the kernel shows them: each node's
// SLIT distances and CPUs, and each CPU's socket, which is what
// k8s.io/dynamic-resource-allocation/deviceattribute reads for the list
// form of numaNode (same-socket nodes at the smallest distance).
func (w *writer) numa(t sim.NUMATopology) {
	for i, row := range t.Distances {
		dist := make([]string, len(row))
		for j, d := range row {
			dist[j] = strconv.Itoa(d)
		}
		dir := filepath.Join("sys/devices/system/node", fmt.Sprintf("node%d", i))
		w.file(filepath.Join(dir, "distance"), []byte(strings.Join(dist, " ")+"\n"), 0o444)
		first := i * cpusPerNUMANode
		w.file(filepath.Join(dir, "cpulist"), fmt.Appendf(nil, "%d-%d\n", first, first+cpusPerNUMANode-1), 0o444)
		for c := first; c < first+cpusPerNUMANode; c++ {
			w.file(filepath.Join("sys/devices/system/cpu", fmt.Sprintf("cpu%d", c), "topology/physical_package_id"),
				fmt.Appendf(nil, "%d\n", t.Socket[i]), 0o444)
		}
	}
}

// rootPort picks a free address for a root port on the root complex's bus:
// "pci0000:15" -> "0000:15:01.0", or the next free device number.
func rootPort(pcieRoot string, taken map[string]bool) (string, error) {
	var domain, bus uint32
	if c, err := fmt.Sscanf(pcieRoot, "pci%4x:%2x", &domain, &bus); c != 2 || err != nil {
		return "", fmt.Errorf("PCIe root %q is not like pci0000:15", pcieRoot)
	}
	for dev := 1; dev <= 0x1f; dev++ {
		if port := fmt.Sprintf("%04x:%02x:%02x.0", domain, bus, dev); !taken[port] {
			return port, nil
		}
	}
	return "", fmt.Errorf("no free root port address on PCIe root %s", pcieRoot)
}
