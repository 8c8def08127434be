package sim

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// pciAddress is a PCI address domain:bus:device.function.
type pciAddress struct {
	Domain, Bus, Device, Function uint32
}

var pciRE = regexp.MustCompile(`^([0-9a-fA-F]{1,8}):([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])$`)

// parsePCIAddress accepts the forms NVML and sysfs use: "0000:1b:00.0",
// "00000000:1B:00.0" and, without the domain, "1b:00.0".
func parsePCIAddress(s string) (pciAddress, error) {
	if strings.Count(s, ":") == 1 {
		s = "0000:" + s
	}
	m := pciRE.FindStringSubmatch(s)
	if m == nil {
		return pciAddress{}, fmt.Errorf("%q is not a PCI address like \"0000:1b:00.0\"", s)
	}
	var v [4]uint32
	for i := range v {
		n, _ := strconv.ParseUint(m[i+1], 16, 32) // the regexp guarantees hex
		v[i] = uint32(n)
	}
	if v[2] > 0x1f {
		return pciAddress{}, fmt.Errorf("%q is not a PCI address: the device number must be at most 1f", s)
	}
	return pciAddress{Domain: v[0], Bus: v[1], Device: v[2], Function: v[3]}, nil
}

// String is the canonical lower-case sysfs form "0000:1b:00.0".
func (a pciAddress) String() string {
	return fmt.Sprintf("%04x:%02x:%02x.%x", a.Domain, a.Bus, a.Device, a.Function)
}

// nvmlBusID is the form NVML reports in nvmlPciInfo_t.busId: "00000000:1B:00.0".
func (a pciAddress) nvmlBusID() string {
	return fmt.Sprintf("%08X:%02X:%02X.%X", a.Domain, a.Bus, a.Device, a.Function)
}

// nvmlBusIDLegacy is nvmlPciInfo_t.busIdLegacy: "0000:1B:00.0".
func (a pciAddress) nvmlBusIDLegacy() string {
	return fmt.Sprintf("%04X:%02X:%02X.%X", a.Domain, a.Bus, a.Device, a.Function)
}

func (a pciAddress) less(b pciAddress) bool {
	if a.Domain != b.Domain {
		return a.Domain < b.Domain
	}
	if a.Bus != b.Bus {
		return a.Bus < b.Bus
	}
	if a.Device != b.Device {
		return a.Device < b.Device
	}
	return a.Function < b.Function
}

var pcieRootRE = regexp.MustCompile(`^pci([0-9a-f]{4}):([0-9a-f]{2})$`)

// normalizePCIeRoot checks a root complex name like "pci0000:00".
func normalizePCIeRoot(s string) (string, error) {
	l := strings.ToLower(s)
	if !pcieRootRE.MatchString(l) {
		return "", fmt.Errorf("%q is not a PCIe root complex name like \"pci0000:00\" (the directory under /sys/devices)", s)
	}
	return l, nil
}

// toCChars copies s into a zeroed C char array, keeping a terminating NUL.
func toCChars[T ~int8 | ~uint8](dst []T, s string) {
	n := min(len(s), len(dst)-1)
	for i := range n {
		dst[i] = T(s[i])
	}
	dst[n] = 0
}
