package sim

import "github.com/NVIDIA/go-nvml/pkg/nvml"

// MIG mode changes per architecture. nvml.h (nvmlDeviceSetMigMode): the
// call "may unbind or reset the device to activate the requested mode";
// activationStatus says why that failed (IN_USE when the GPU is not idle,
// RESET_REQUIRED where no reset is exposed), and nvmlDeviceGetMigMode
// returns the current and the pending mode. Hopper and later switch without
// a reset (NVIDIA's DRA driver, supportsMIGModeToggle: arch >= Hopper); on
// Ampere (A100, A30) a switch needs a GPU reset. Whether the driver
// resets an idle A100 by itself is not known here, so the simulator takes
// the least kind answer: the call succeeds, the mode stays pending with
// activationStatus IN_USE (a node always has NVML clients, the plugin
// among them), and the current mode changes only at a (simulated) GPU
// reset (Server.Reset) or reboot.

// migToggleWithoutReset reports whether the model switches MIG mode at
// once.
func (m *Model) migToggleWithoutReset() bool {
	return m.Architecture >= nvml.DEVICE_ARCH_HOPPER && m.Architecture != nvml.DEVICE_ARCH_UNKNOWN
}

func migModeOf(enabled bool) int {
	if enabled {
		return nvml.DEVICE_MIG_ENABLE
	}
	return nvml.DEVICE_MIG_DISABLE
}

// setMigMode implements nvmlDeviceSetMigMode. Like go-nvml's
// Device.SetMigMode it returns activationStatus first, then the call's
// return code.
func (d *device) setMigMode(mode int) (nvml.Return, nvml.Return) {
	if mode != nvml.DEVICE_MIG_ENABLE && mode != nvml.DEVICE_MIG_DISABLE {
		return nvml.ERROR_INVALID_ARGUMENT, nvml.ERROR_INVALID_ARGUMENT
	}
	d.srv.mu.Lock()
	defer d.srv.mu.Unlock()
	if mode == nvml.DEVICE_MIG_DISABLE && len(d.gis) > 0 {
		return nvml.ERROR_IN_USE, nvml.ERROR_IN_USE
	}
	d.migPending = mode
	defer d.srv.persistLocked()
	if mode == d.migMode || d.model().migToggleWithoutReset() {
		d.migMode = mode
		return nvml.SUCCESS, nvml.SUCCESS
	}
	return nvml.ERROR_IN_USE, nvml.SUCCESS
}
