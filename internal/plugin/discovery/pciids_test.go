package discovery

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDiscoverPCIIDs: the PCI vendor and device IDs come from the device's
// vendor and device files in sysfs, as NVIDIA's driver reads them; both or
// neither.
func TestDiscoverPCIIDs(t *testing.T) {
	for name, tc := range map[string]struct {
		vendor, device     string // file content; "" : no file
		wantVendor, wantID uint16
	}{
		"both":             {vendor: "0x10de\n", device: "0x2330\n", wantVendor: 0x10de, wantID: 0x2330},
		"no device file":   {vendor: "0x10de\n"},
		"no files":         {},
		"not hexadecimal":  {vendor: "4318\n", device: "0x2330\n"},
		"garbage":          {vendor: "0x10de\n", device: "0xgpu\n"},
		"more than 16 bit": {vendor: "0x10de\n", device: "0x12330\n"},
	} {
		t.Run(name, func(t *testing.T) {
			srv := numaProfile(t, "not-supported")
			sys := t.TempDir()
			dir := filepath.Join(sys, "bus", "pci", "devices", "0000:17:00.0")
			require.NoError(t, os.MkdirAll(dir, 0o755))
			for file, v := range map[string]string{"vendor": tc.vendor, "device": tc.device} {
				if v != "" {
					require.NoError(t, os.WriteFile(filepath.Join(dir, file), []byte(v), 0o444))
				}
			}
			node, err := Discover(context.Background(), simOnly{srv}, Options{SysfsRoot: sys})
			require.NoError(t, err)
			require.Len(t, node.GPUs, 1)
			require.Equal(t, tc.wantVendor, node.GPUs[0].PCIVendorID)
			require.Equal(t, tc.wantID, node.GPUs[0].PCIDeviceID)
		})
	}
}

// With the simulator's own topology (no sysfs) the IDs are the model's
// pciDeviceID, what the fake driver root writes into sysfs.
func TestDiscoverPCIIDsFromSimulator(t *testing.T) {
	node, err := Discover(context.Background(), numaProfile(t, "not-supported"), Options{SysfsRoot: t.TempDir()})
	require.NoError(t, err)
	require.Len(t, node.GPUs, 1)
	require.Equal(t, uint16(0x10de), node.GPUs[0].PCIVendorID)
	require.Equal(t, uint16(0x2330), node.GPUs[0].PCIDeviceID)
}
