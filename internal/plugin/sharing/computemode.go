package sharing

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/api/v1alpha1"
)

// ComputeModes reads and sets a GPU's compute mode. The mode is per GPU:
// a MIG-enabled GPU's is set per MIG device, which the plugin never does
// (as NVIDIA's driver, which sets it on whole GPUs only).
type ComputeModes interface {
	ComputeMode(ctx context.Context, uuid string) (nvml.ComputeMode, error)
	SetComputeMode(ctx context.Context, uuid string, mode nvml.ComputeMode) error
}

// NVMLComputeMode reads and sets it through nvmlDeviceGet/SetComputeMode
// (setting needs root).
type NVMLComputeMode struct{ Lib nvml.Interface }

// ComputeMode implements ComputeModes.
func (n NVMLComputeMode) ComputeMode(_ context.Context, uuid string) (nvml.ComputeMode, error) {
	dev, ret := n.Lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return 0, fmt.Errorf("read the compute mode of GPU %s: get its handle: %w", uuid, ret)
	}
	mode, ret := dev.GetComputeMode()
	if ret != nvml.SUCCESS {
		return 0, fmt.Errorf("read the compute mode of GPU %s: %w", uuid, ret)
	}
	return mode, nil
}

// SetComputeMode implements ComputeModes.
func (n NVMLComputeMode) SetComputeMode(ctx context.Context, uuid string, mode nvml.ComputeMode) error {
	dev, ret := n.Lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("set the compute mode of GPU %s: get its handle: %w", uuid, ret)
	}
	if ret := dev.SetComputeMode(mode); ret != nvml.SUCCESS {
		return fmt.Errorf("set the compute mode of GPU %s to %s: %w", uuid, ComputeModeName(mode), ret)
	}
	klog.FromContext(ctx).V(3).Info("Set compute mode", "uuid", uuid, "mode", ComputeModeName(mode))
	return nil
}

var computeModeNames = map[nvml.ComputeMode]string{
	nvml.COMPUTEMODE_DEFAULT:           "DEFAULT",
	nvml.COMPUTEMODE_EXCLUSIVE_THREAD:  "EXCLUSIVE_THREAD",
	nvml.COMPUTEMODE_PROHIBITED:        "PROHIBITED",
	nvml.COMPUTEMODE_EXCLUSIVE_PROCESS: "EXCLUSIVE_PROCESS",
}

// ComputeModeName is the mode as nvidia-smi -c names it.
func ComputeModeName(m nvml.ComputeMode) string {
	if s, ok := computeModeNames[m]; ok {
		return s
	}
	return fmt.Sprintf("compute mode %d", int32(m))
}

// ParseComputeMode reads a name ComputeModeName wrote.
func ParseComputeMode(s string) (nvml.ComputeMode, error) {
	for m, name := range computeModeNames {
		if strings.EqualFold(s, name) {
			return m, nil
		}
	}
	return 0, fmt.Errorf("unknown compute mode %q", s)
}

// ComputeModeHint tells the operator what to fix when NVML refuses to read
// or set a compute mode.
func ComputeModeHint(err error) string {
	switch {
	case errors.Is(err, nvml.ERROR_NO_PERMISSION):
		return "the plugin must run as root (a privileged container) to change a GPU's compute mode"
	case errors.Is(err, nvml.ERROR_NOT_SUPPORTED):
		return "this GPU does not let its compute mode be changed here (MIG enabled, or a product or " +
			"virtualization that fixes it); use the claim without this sharing strategy"
	case errors.Is(err, nvml.ERROR_GPU_IS_LOST), errors.Is(err, nvml.ERROR_RESET_REQUIRED):
		return "the GPU does not answer; check its health (XID events, nvidia-smi) and reset or replace it"
	}
	return "check that nvidia-smi -i <GPU> -c DEFAULT works on the node"
}

// ComputeModeNeeded tells which compute mode a claim's use of the device
// needs, if any, as NVIDIA runs them: EXCLUSIVE_PROCESS for an MPS claim on
// a whole GPU (only its MPS server then has a context on it), DEFAULT for a
// time-sliced GPU and for a consumable share (a share that consumed memory
// has its own MPS server, and shares of no memory run their processes
// directly; EXCLUSIVE_PROCESS would admit only the first). MIG devices need
// none: the mode is per GPU, and the other MIG devices of the GPU belong to
// other claims.
func (d *Device) ComputeModeNeeded() (nvml.ComputeMode, bool) {
	switch {
	case d.MIG:
		return 0, false
	case d.Share:
		return nvml.COMPUTEMODE_DEFAULT, true
	case d.Strategy() == v1alpha1.MPSStrategy:
		return nvml.COMPUTEMODE_EXCLUSIVE_PROCESS, true
	case d.Strategy() == v1alpha1.TimeSlicingStrategy:
		return nvml.COMPUTEMODE_DEFAULT, true
	}
	return 0, false
}
