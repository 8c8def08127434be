package computedomain

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/internal/plugin/slice"
)

func TestDevices(t *testing.T) {
	for _, tc := range []struct {
		name      string
		opts      DeviceOptions
		channels  int
		sliceLens []int
		wantErr   string
	}{
		{name: "default: 2048 channels and the daemon in 17 slices", opts: DeviceOptions{},
			channels: 2048, sliceLens: append(repeat(128, 16), 1)},
		{name: "clique published", opts: DeviceOptions{Channels: 3, CliqueID: "4e1a5c3b-7d3e-4c1f-9a2b-5f6e7d8c9b0a.32766"},
			channels: 3, sliceLens: []int{4}},
		{name: "smaller slices", opts: DeviceOptions{Channels: 10, MaxDevicesPerSlice: 4},
			channels: 10, sliceLens: []int{4, 4, 3}},
		{name: "one channel", opts: DeviceOptions{Channels: 1}, channels: 1, sliceLens: []int{2}},
		{name: "negative", opts: DeviceOptions{Channels: -1}, wantErr: "between 1 and 1048576"},
		{name: "beyond the minor numbers", opts: DeviceOptions{Channels: MaxChannels + 1}, wantErr: "between 1 and 1048576"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Resources("node-a", tc.opts)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Len(t, res.Pools, 1)
			pool, ok := res.Pools["node-a"]
			require.True(t, ok, "the pool is named after the node")
			var lens []int
			var all []resourceapi.Device
			for _, s := range pool.Slices {
				lens = append(lens, len(s.Devices))
				assert.LessOrEqual(t, len(s.Devices), resourceapi.ResourceSliceMaxDevices)
				all = append(all, s.Devices...)
			}
			assert.Equal(t, tc.sliceLens, lens)
			require.Len(t, all, tc.channels+1)
			names := map[string]bool{}
			for i, d := range all {
				require.False(t, names[d.Name], "device %s twice", d.Name)
				names[d.Name] = true
				wantName, wantType, wantID := ChannelDeviceName(i), TypeChannel, int64(i)
				if i == tc.channels {
					wantName, wantType, wantID = "daemon-0", TypeDaemon, 0
				}
				assert.Equal(t, wantName, d.Name)
				require.NotNil(t, d.Attributes[AttrType].StringValue, d.Name)
				assert.Equal(t, wantType, *d.Attributes[AttrType].StringValue, d.Name)
				require.NotNil(t, d.Attributes[AttrID].IntValue, d.Name)
				assert.Equal(t, wantID, *d.Attributes[AttrID].IntValue, d.Name)
				clique, has := d.Attributes[slice.AttrCliqueID]
				if tc.opts.CliqueID == "" {
					assert.False(t, has, "%s: cliqueID without a clique", d.Name)
				} else {
					require.NotNil(t, clique.StringValue, d.Name)
					assert.Equal(t, tc.opts.CliqueID, *clique.StringValue, d.Name)
				}
				assert.LessOrEqual(t, len(d.Name), 63, "a device name is a DNS label")
				assert.False(t, strings.ContainsAny(d.Name, "_."), d.Name)
			}
		})
	}
}

// The attributes of one device are its own: changing one device's clique
// must not change another's (pointers shared between devices would).
func TestDevicesDoNotShareAttributes(t *testing.T) {
	devs, err := Devices(DeviceOptions{Channels: 2, CliqueID: "c.1"})
	require.NoError(t, err)
	*devs[0].Attributes[slice.AttrCliqueID].StringValue = "changed"
	*devs[0].Attributes[AttrType].StringValue = "changed"
	assert.Equal(t, "c.1", *devs[1].Attributes[slice.AttrCliqueID].StringValue)
	assert.Equal(t, TypeChannel, *devs[1].Attributes[AttrType].StringValue)
}

func repeat(v, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func ExampleChannelDeviceName() {
	fmt.Println(ChannelDeviceName(0), ChannelDeviceName(2047), DaemonDeviceName)
	// Output: channel-0 channel-2047 daemon-0
}
