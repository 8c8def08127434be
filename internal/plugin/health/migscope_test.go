package health

import (
	"context"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
)

// migDev is a MIG slice device of GPU parent starting at memory slice start.
func migDev(name, parent string, start int64) resourceapi.Device {
	return resourceapi.Device{Name: name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		attrParentUUID: {StringValue: &parent}, attrPlacementStart: {IntValue: &start}}}
}

// TestMIGScopedXID: an XID event that carries a GPU instance ID (simulated
// NVML sets it for MIG-scoped faults, as NVML does) taints only the MIG
// devices at that instance's placement; the GPU's other MIG devices stay
// healthy. Destroying the GPU instance clears it. A GPU-wide XID still
// taints every device of the GPU. Driver R535 (no recovery action), so no
// GPU-wide recovery taint hides the difference.
func TestMIGScopedXID(t *testing.T) {
	for _, tc := range []struct {
		name     string
		driver   string
		xid      uint64
		scoped   bool
		want     Health // of the MIG device at slice 4
		wantZero Health // of the MIG device at slice 0
	}{
		{name: "fatal XID of one instance, old driver", driver: oldDriver, xid: 95, scoped: true, want: Unhealthy, wantZero: Healthy},
		{name: "contained ECC XID of one instance, new driver", driver: newDriver, xid: 94, scoped: true, want: Degraded, wantZero: Healthy},
		{name: "GPU-wide fatal XID", driver: oldDriver, xid: 95, want: Unhealthy, wantZero: Unhealthy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			f := newPersistFixture(t, tc.driver)
			gpu := f.gpus[0]
			activation, ret := gpu.Device.SetMigMode(nvml.DEVICE_MIG_ENABLE)
			require.Equal(t, []nvml.Return{nvml.SUCCESS, nvml.SUCCESS}, []nvml.Return{activation, ret})
			info, _ := gpu.Device.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_3_SLICE)
			var gis []nvml.GpuInstance
			for _, start := range []uint32{0, 4} {
				gi, ret := gpu.Device.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: start, Size: 4})
				require.Equal(t, nvml.SUCCESS, ret)
				gis = append(gis, gi)
			}
			at4, _ := gis[1].GetInfo()
			f.mon.ProbeAll(ctx)
			f.events(t, func() {
				if tc.scoped {
					require.NoError(t, f.srv.InjectMIGXID(gpu.UUID, tc.xid, at4.Id, 0xFFFFFFFF))
				} else {
					require.NoError(t, f.srv.InjectXID(gpu.UUID, tc.xid))
				}
			})
			f.mon.ProbeAll(ctx)
			snap := f.mon.Snapshot()
			devs := []resourceapi.Device{migDev("gpu-0-mig-3g40gb-0", gpu.UUID, 0), migDev("gpu-0-mig-3g40gb-4", gpu.UUID, 4)}
			assert.Equal(t, tc.wantZero, snap.DeviceHealth(devs[0]), "the other MIG device")
			assert.Equal(t, tc.want, snap.DeviceHealth(devs[1]), "the MIG device of the instance")
			tainted := snap.ApplyTaints(devs)
			assert.Equal(t, tc.wantZero == Healthy, len(tainted[0].Taints) == 0, "taints of the other MIG device: %v", tainted[0].Taints)
			assert.NotEmpty(t, tainted[1].Taints)
			report := snap.Report(Refs("pool", devs), f.now, 0)
			assert.Equal(t, tc.wantZero == Healthy, report.Devices[0].Health == "Healthy")
			if !tc.scoped {
				return
			}
			assert.Contains(t, snap.DeviceMessage(devs[1]), "GPU instance")
			assert.Equal(t, Healthy, snap.Health(gpu.UUID), "the GPU itself")
			// The tenant's MIG device is destroyed (unprepare): its XID goes with it.
			require.Equal(t, nvml.SUCCESS, gis[1].Destroy())
			f.mon.ProbeAll(ctx)
			assert.Equal(t, Healthy, f.mon.Snapshot().DeviceHealth(devs[1]))
		})
	}
}
