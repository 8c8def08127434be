package sharing

import (
	"context"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/api/v1alpha1"
)

// ComputeModeSetter puts a GPU into EXCLUSIVE_PROCESS compute mode while an
// MPS claim holds it (only its MPS server then has a context on it, as
// NVIDIA runs MPS) and back into DEFAULT after.
type ComputeModeSetter interface {
	SetComputeMode(ctx context.Context, uuid string, exclusive bool) error
}

// NVMLComputeMode sets it through nvmlDeviceSetComputeMode (root only).
type NVMLComputeMode struct{ Lib nvml.Interface }

// SetComputeMode implements ComputeModeSetter.
func (n NVMLComputeMode) SetComputeMode(ctx context.Context, uuid string, exclusive bool) error {
	mode := nvml.COMPUTEMODE_DEFAULT
	if exclusive {
		mode = nvml.COMPUTEMODE_EXCLUSIVE_PROCESS
	}
	dev, ret := n.Lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("set the compute mode of GPU %s: get its handle: %w", uuid, ret)
	}
	if ret := dev.SetComputeMode(mode); ret != nvml.SUCCESS {
		return fmt.Errorf("set the compute mode of GPU %s to %d: %w", uuid, mode, ret)
	}
	klog.FromContext(ctx).V(3).Info("Set compute mode", "uuid", uuid, "exclusiveProcess", exclusive)
	return nil
}

// ExclusiveMPS tells whether a device's MPS daemon should have the GPU in
// EXCLUSIVE_PROCESS mode: an MPS claim on a whole GPU. Not a consumable
// share (several claims' daemons share the GPU, and EXCLUSIVE_PROCESS would
// admit only one MPS server) and not a MIG device (the mode is then set per
// MIG device, which is not done).
func (d *Device) ExclusiveMPS() bool {
	return d.Strategy() == v1alpha1.MPSStrategy && !d.Share && !d.MIG
}
