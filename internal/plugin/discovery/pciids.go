package discovery

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/klog/v2"
)

// PCIIDResolver is implemented by backends that know the PCI vendor and
// device IDs of a GPU without sysfs (the simulated backend does, see
// test/sim's Server.PCIIDs). On real nodes they are read from sysfs.
type PCIIDResolver interface {
	PCIIDs(pciBusID string) (vendor, device uint16, ok bool)
}

// pciIDs are the vendor and device IDs of the GPU's PCI device, as the
// kernel shows them in <sysfs>/bus/pci/devices/<bus ID>/{vendor,device}
// ("0x10de"), where NVIDIA's driver reads them for its vfio devices; 0 and 0
// when either is missing or malformed (logged).
func pciIDs(ctx context.Context, busID string, resolver PCIIDResolver, opts Options) (uint16, uint16) {
	if resolver != nil {
		vendor, device, ok := resolver.PCIIDs(busID)
		if !ok {
			return 0, 0
		}
		return vendor, device
	}
	root := opts.SysfsRoot
	if root == "" {
		root = "/sys"
	}
	var ids [2]uint16
	for i, name := range []string{"vendor", "device"} {
		file := filepath.Join(root, "bus", "pci", "devices", busID, name)
		id, err := readPCIID(file)
		if err != nil {
			klog.FromContext(ctx).V(2).Info("PCI IDs unknown, not publishing deviceID and vendorID", "pciBusID", busID, "err", err)
			return 0, 0
		}
		ids[i] = id
	}
	return ids[0], ids[1]
}

// readPCIID reads a sysfs ID file such as vendor ("0x10de\n").
func readPCIID(file string) (uint16, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if !strings.HasPrefix(s, "0x") {
		return 0, fmt.Errorf("%s: %q is not a hexadecimal PCI ID", file, s)
	}
	n, err := strconv.ParseUint(s[2:], 16, 16)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a PCI ID: %w", file, s, err)
	}
	return uint16(n), nil
}
