package slice_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/internal/plugin/slice"
)

// TestPassthroughDevices: with passthrough, each whole GPU gets a vfio
// sibling, and the two consume all of one counter set of their own; off,
// nothing changes. MIG-enabled and unreachable GPUs get none.
func TestPassthroughDevices(t *testing.T) {
	base := simNode(t, "dgx-h100", "node-a")
	tests := []struct {
		name     string
		mutate   func(n *model.Node)
		on       bool
		wantVFIO []string
	}{
		{name: "off", on: false},
		{name: "on", on: true, wantVFIO: vfioNames(base)},
		{name: "on, iommufd", on: true, mutate: func(n *model.Node) { n.IOMMUFD = true }, wantVFIO: vfioNames(base)},
		{name: "PCI IDs unknown", on: true, mutate: func(n *model.Node) {
			for i := range n.GPUs {
				n.GPUs[i].PCIVendorID, n.GPUs[i].PCIDeviceID = 0, 0
			}
		}, wantVFIO: vfioNames(base)},
		{name: "MIG on and unreachable GPUs are left out", on: true, mutate: func(n *model.Node) {
			n.GPUs[0].MIGEnabled = true
			n.GPUs[1].Unreachable = "gpu-is-lost"
		}, wantVFIO: vfioNames(base)[2:]},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			node := simNode(t, "dgx-h100", "node-a")
			if tc.mutate != nil {
				tc.mutate(node)
			}
			res, err := slice.Resources("node-a", node, slice.Options{Passthrough: tc.on})
			require.NoError(t, err)
			devices, counters := map[string]resourceapi.Device{}, map[string]resourceapi.CounterSet{}
			for _, s := range res.Pools["node-a"].Slices {
				for _, d := range s.Devices {
					devices[d.Name] = d
				}
				for _, c := range s.SharedCounters {
					counters[c.Name] = c
				}
			}
			var got []string
			for _, g := range node.GPUs {
				v, ok := devices[g.VFIODeviceName()]
				whole := devices[g.DeviceName()]
				if !ok {
					for _, c := range whole.ConsumesCounters {
						require.NotContains(t, c.CounterSet, "passthrough", "a GPU without a vfio device consumes no passthrough counter")
					}
					continue
				}
				got = append(got, v.Name)
				require.Equal(t, slice.DeviceTypeVFIO, *v.Attributes[slice.AttrType].StringValue)
				require.Equal(t, g.UUID, *v.Attributes[slice.AttrUUID].StringValue)
				require.Equal(t, g.PCIBusID, *v.Attributes["resource.kubernetes.io/pciBusID"].StringValue)
				require.Equal(t, node.IOMMUFD, *v.Attributes[slice.AttrIOMMUFDEnabled].BoolValue)
				if g.PCIVendorID == 0 {
					require.NotContains(t, v.Attributes, slice.AttrVendorID)
					require.NotContains(t, v.Attributes, slice.AttrDeviceID)
				} else {
					require.Equal(t, "0x10de", *v.Attributes[slice.AttrVendorID].StringValue, "NVIDIA's format")
					require.Equal(t, "0x2330", *v.Attributes[slice.AttrDeviceID].StringValue, "an H100 SXM5's, as sysfs shows it")
				}
				for _, name := range []resourceapi.QualifiedName{slice.AttrIOMMUFDEnabled, slice.AttrVendorID, slice.AttrDeviceID} {
					require.NotContains(t, whole.Attributes, name, "only vfio devices carry it, as NVIDIA's")
				}
				require.Len(t, v.ConsumesCounters, 1)
				set := v.ConsumesCounters[0].CounterSet
				require.Contains(t, counters, set)
				require.Contains(t, whole.ConsumesCounters, v.ConsumesCounters[0], "the GPU's device consumes the same counter")
				for name, c := range v.ConsumesCounters[0].Counters {
					require.Equal(t, counters[set].Counters[name].Value, c.Value, "each device takes the whole counter")
				}
			}
			require.Equal(t, tc.wantVFIO, got)
		})
	}
}

func vfioNames(n *model.Node) []string {
	var out []string
	for _, g := range n.GPUs {
		out = append(out, g.VFIODeviceName())
	}
	return out
}
