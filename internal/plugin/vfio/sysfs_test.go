package vfio

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestIOMMUGroup reads the group from the device's iommu_group link. A host
// without the IOMMU on has no link at all (the lent H200 machine: no group
// under /sys/kernel/iommu_groups); the error then says what to turn on.
func TestIOMMUGroup(t *testing.T) {
	const addr = "0000:00:06.0"
	for _, tc := range []struct {
		name, link string
		want       int
		wantErr    string
	}{
		{name: "group", link: "../../../kernel/iommu_groups/17", want: 17},
		{name: "IOMMU off", wantErr: "has no IOMMU group: is the IOMMU enabled"},
		{name: "not a group", link: "../../../kernel/iommu_groups/x", wantErr: "does not end in a group number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			dev := filepath.Join(root, "bus", "pci", "devices", addr)
			require.NoError(t, os.MkdirAll(dev, 0o755))
			if tc.link != "" {
				require.NoError(t, os.Symlink(tc.link, filepath.Join(dev, "iommu_group")))
			}
			got, err := HostSysfs{Root: root}.IOMMUGroup(addr)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				require.ErrorContains(t, err, addr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}
