package computedomain

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/gpudra/gpudra/internal/plugin/slice"
)

// Device types and attributes of the channel driver. The names and values
// are NVIDIA's (compute-domain.nvidia.com), so that NVIDIA's DeviceClasses
// and CEL selectors work unchanged.
const (
	// AttrType is "channel" or "daemon".
	AttrType resourceapi.QualifiedName = "type"
	// AttrID is the channel's number (its device node's minor), 0 for the
	// daemon device.
	AttrID resourceapi.QualifiedName = "id"

	TypeChannel = "channel"
	TypeDaemon  = "daemon"

	// DefaultChannels is how many channels a node publishes by default:
	// NVIDIA's driver publishes channel-0 to channel-2047, the IMEX
	// channels the kernel driver offers by default.
	DefaultChannels = 2048
	// MaxChannels bounds DeviceOptions.Channels: the minor numbers of
	// nvidia-caps-imex-channels are 20 bits wide.
	MaxChannels = 1 << 20
)

// DeviceOptions says what the node publishes.
type DeviceOptions struct {
	// Channels is how many channel devices (channel-0 ...) the node
	// publishes; 0 means DefaultChannels.
	Channels int
	// CliqueID is the NVLink clique of the node's GPUs (discovery's
	// cliqueID attribute), published on every device so that a claim can
	// match it; empty: the GPUs have none and the attribute is left out.
	CliqueID string
	// MaxDevicesPerSlice splits the pool (default and at most the API's
	// 128 per slice).
	MaxDevicesPerSlice int
}

func (o DeviceOptions) channels() (int, error) {
	switch {
	case o.Channels == 0:
		return DefaultChannels, nil
	case o.Channels < 0 || o.Channels > MaxChannels:
		return 0, fmt.Errorf("%d IMEX channels: the number of channels to publish must be between 1 and %d (default %d)",
			o.Channels, MaxChannels, DefaultChannels)
	}
	return o.Channels, nil
}

// ChannelDeviceName and DaemonDeviceName are the devices' names in the
// ResourceSlices (NVIDIA's names).
func ChannelDeviceName(id int) string { return fmt.Sprintf("%s-%d", TypeChannel, id) }

// DaemonDeviceName is the node's one daemon device.
const DaemonDeviceName = TypeDaemon + "-0"

// Devices returns the channel driver's devices of one node: channel-0 to
// channel-(N-1), then daemon-0.
func Devices(opts DeviceOptions) ([]resourceapi.Device, error) {
	n, err := opts.channels()
	if err != nil {
		return nil, err
	}
	devices := make([]resourceapi.Device, 0, n+1)
	for id := range n {
		devices = append(devices, device(ChannelDeviceName(id), TypeChannel, id, opts.CliqueID))
	}
	return append(devices, device(DaemonDeviceName, TypeDaemon, 0, opts.CliqueID)), nil
}

func device(name, typ string, id int, cliqueID string) resourceapi.Device {
	t, i := typ, int64(id)
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		AttrType: {StringValue: &t},
		AttrID:   {IntValue: &i},
	}
	if cliqueID != "" {
		c := cliqueID
		attrs[slice.AttrCliqueID] = resourceapi.DeviceAttribute{StringValue: &c}
	}
	return resourceapi.Device{Name: name, Attributes: attrs}
}

// Resources is the node's DriverResources for the channel driver: one pool
// named poolName (the node), split into slices of at most
// opts.MaxDevicesPerSlice devices (2049 devices are 17 slices of 128).
func Resources(poolName string, opts DeviceOptions) (resourceslice.DriverResources, error) {
	devices, err := Devices(opts)
	if err != nil {
		return resourceslice.DriverResources{}, err
	}
	return slice.Pack(poolName, devices, slice.Options{MaxDevicesPerSlice: opts.MaxDevicesPerSlice}), nil
}

// DaemonResources is the node's pool with the daemon device alone: what
// the node publishes while its NVLink fabric is not usable (the channel
// plugin's fabric watch), so that no new claim gets a channel here while
// the domains' status keeps the node's clique.
func DaemonResources(poolName string, opts DeviceOptions) resourceslice.DriverResources {
	daemon := device(DaemonDeviceName, TypeDaemon, 0, opts.CliqueID)
	return slice.Pack(poolName, []resourceapi.Device{daemon}, slice.Options{MaxDevicesPerSlice: opts.MaxDevicesPerSlice})
}
