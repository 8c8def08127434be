package prepare

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/internal/plugin/vfio"
	"github.com/gpudra/gpudra/internal/shared/compat"
	"github.com/gpudra/gpudra/test/fakedriver"
)

// nvidiaVFIOEnv is vfioEnv in the NVIDIA compatibility mode (where
// VfioDeviceConfig is read), its node offering iommufd or not.
func nvidiaVFIOEnv(t *testing.T, iommufd bool) (*env, *fakedriver.Kernel) {
	e, k, _ := vfioEnv(t, 2)
	names := compat.MustResolve(compat.Flags{Compatibility: string(compat.NVIDIA), Passthrough: true})
	e.names = &names
	if iommufd {
		require.NoError(t, fakedriver.EnableIOMMUFD(k.Root))
	}
	on, err := vfio.IOMMUFDEnabled(e.pass.Dev)
	require.NoError(t, err)
	e.pass.IOMMUFD = on
	return e, k
}

// nvidiaVFIOClaim allocates gpu-vfio-1 under NVIDIA's driver name, with a
// VfioDeviceConfig when iommu is set.
func nvidiaVFIOClaim(iommu string) *resourceapi.ResourceClaim {
	var configs []resourceapi.DeviceAllocationConfiguration
	if iommu != "" {
		cfg := opaque(resourceapi.AllocationConfigSourceClaim,
			`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"VfioDeviceConfig","iommu":`+iommu+`}`, "vm")
		cfg.Opaque.Driver = compat.NVIDIADriverName
		configs = append(configs, cfg)
	}
	c := claim(uidA, "vm", []alloc{{request: "vm", device: "gpu-vfio-1"}}, configs...)
	for i := range c.Status.Allocation.Devices.Results {
		c.Status.Allocation.Devices.Results[i].Driver = compat.NVIDIADriverName
	}
	return c
}

// TestPrepareVFIOBackends: the container's nodes for each backend policy,
// with and without the API device, on a node with and without /dev/iommu,
// as NVIDIA's driver gives them: iommufd only when the claim prefers it
// and the node offers it, then the cdev the kernel made at bind (read from
// sysfs) and /dev/iommu as the API device; otherwise the group's node and
// /dev/vfio/vfio.
func TestPrepareVFIOBackends(t *testing.T) {
	const cdev = "/dev/vfio/devices/vfio100" // the first cdev of the simulated kernel
	for _, tc := range []struct {
		name    string
		iommu   string // the VfioDeviceConfig's iommu; "" no config
		iommufd bool   // the node has /dev/iommu
		want    []string
	}{
		{name: "no config", want: []string{"group"}},
		{name: "no config, iommufd node", iommufd: true, want: []string{"group"}},
		{name: "LegacyOnly", iommu: `{"backendPolicy":"LegacyOnly"}`, want: []string{"group"}},
		{name: "LegacyOnly, API device", iommu: `{"backendPolicy":"LegacyOnly","enableAPIDevice":true}`, want: []string{"group", vfio.ContainerPath}},
		{name: "LegacyOnly, iommufd node", iommu: `{"backendPolicy":"LegacyOnly"}`, iommufd: true, want: []string{"group"}},
		{name: "LegacyOnly, API device, iommufd node", iommu: `{"backendPolicy":"LegacyOnly","enableAPIDevice":true}`, iommufd: true,
			want: []string{"group", vfio.ContainerPath}},
		{name: "PreferIommuFD, no /dev/iommu", iommu: `{"backendPolicy":"PreferIommuFD"}`, want: []string{"group"}},
		{name: "PreferIommuFD, API device, no /dev/iommu", iommu: `{"backendPolicy":"PreferIommuFD","enableAPIDevice":true}`,
			want: []string{"group", vfio.ContainerPath}},
		{name: "PreferIommuFD", iommu: `{"backendPolicy":"PreferIommuFD"}`, iommufd: true, want: []string{cdev}},
		{name: "PreferIommuFD, API device", iommu: `{"backendPolicy":"PreferIommuFD","enableAPIDevice":true}`, iommufd: true,
			want: []string{cdev, vfio.IOMMUPath}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, k := nvidiaVFIOEnv(t, tc.iommufd)
			m, _ := e.manager()
			addr := e.node.GPUs[1].PCIBusID
			group, err := k.IOMMUGroup(addr)
			require.NoError(t, err)
			c := nvidiaVFIOClaim(tc.iommu)

			_, err = m.Prepare(ctx(t), c)
			require.NoError(t, err)
			var paths []string
			for _, n := range claimSpec(t, m, uidA).Devices[0].ContainerEdits.DeviceNodes {
				paths = append(paths, n.Path)
				require.Equal(t, "/host-root"+n.Path, n.HostPath)
			}
			want := append([]string(nil), tc.want...)
			if want[0] == "group" {
				want[0] = vfio.GroupPath(group)
			}
			require.Equal(t, want, paths)
			rec, err := m.cfg.Checkpoints.Get(uidA)
			require.NoError(t, err)
			require.Equal(t, want[0] == cdev, rec.Devices[0].VFIO.IOMMUFD, "the record keeps the backend")

			// A restart rewrites a lost spec the same way.
			require.NoError(t, os.Remove(m.cfg.CDI.SpecPath(uidA)))
			m2, _ := e.manager()
			_, err = m2.Prepare(ctx(t), c)
			require.NoError(t, err)
			require.Len(t, claimSpec(t, m2, uidA).Devices[0].ContainerEdits.DeviceNodes, len(want))

			require.NoError(t, m2.Unprepare(ctx(t), ref(c)))
			require.Equal(t, vfio.DriverNVIDIA, driverOf(t, k, addr))
			require.NoFileExists(t, filepath.Join(k.Root, cdev), "the cdev went with vfio-pci")
		})
	}
}

// TestPrepareVFIOWithoutCDev: a claim preferring iommufd on a node with
// /dev/iommu whose kernel made no cdev for the GPU (no
// CONFIG_VFIO_DEVICE_CDEV) fails, saying what to fix, and is rolled back.
func TestPrepareVFIOWithoutCDev(t *testing.T) {
	e, k := nvidiaVFIOEnv(t, false)
	e.pass.IOMMUFD = true // the plugin found /dev/iommu; the kernel makes no cdev
	m, _ := e.manager()
	addr := e.node.GPUs[1].PCIBusID
	_, err := m.Prepare(ctx(t), nvidiaVFIOClaim(`{"backendPolicy":"PreferIommuFD"}`))
	require.ErrorIs(t, err, vfio.ErrNoCDev)
	for _, want := range []string{"gpu-vfio-1", addr, "CONFIG_VFIO_DEVICE_CDEV", "LegacyOnly"} {
		require.ErrorContains(t, err, want)
	}
	require.Equal(t, vfio.DriverNVIDIA, driverOf(t, k, addr), "rolled back")
	rec, err := m.cfg.Checkpoints.Get(uidA)
	require.NoError(t, err)
	require.Nil(t, rec)
}
