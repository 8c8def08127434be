package sim

import "github.com/NVIDIA/go-nvml/pkg/nvml"

// DeviceKey names a GPU or MIG device of a simulated server by numbers that
// stay valid while the server lives: the GPU's index and, for a MIG device,
// its GPU and compute instance IDs.
type DeviceKey struct {
	GPU             int
	MIG             bool
	GPUInstance     uint32
	ComputeInstance uint32
}

// KeyOf returns the key of a device handle of a simulated server without an
// NVML call, so that a library built on the server (a C library handing
// out stable handles) can name a lost GPU, which answers no call, for
// example in the event that reports its XID 79. ok is false for a handle
// the simulator did not make.
func KeyOf(d nvml.Device) (key DeviceKey, ok bool) {
	switch v := d.(type) {
	case *device:
		return DeviceKey{GPU: v.gpu.Index}, true
	case *migDevice:
		gi := v.ci.gi
		gi.dev.srv.mu.Lock() // IDs change when a restore renumbers instances
		defer gi.dev.srv.mu.Unlock()
		return DeviceKey{GPU: gi.dev.gpu.Index, MIG: true, GPUInstance: gi.info.Id, ComputeInstance: v.ci.info.Id}, true
	}
	return DeviceKey{}, false
}
