package discovery

import (
	"context"
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"
)

// addressingModeSymbol is NVML's addressing-mode call, which older drivers
// lack.
const addressingModeSymbol = "nvmlDeviceGetAddressingMode"

// addressingModes names NVML's addressing modes as NVIDIA's driver
// publishes them (go-nvlib's GetAddressingModeAsString).
var addressingModes = map[nvml.DeviceAddressingModeType]string{
	nvml.DEVICE_ADDRESSING_MODE_NONE: "None",
	nvml.DEVICE_ADDRESSING_MODE_HMM:  "HMM",
	nvml.DEVICE_ADDRESSING_MODE_ATS:  "ATS",
}

// addressingMode reads how the GPU addresses memory the CPU allocated:
// "ATS", "HMM" or "None"; "" when the driver lacks the call or the platform
// supports no mode (NOT_SUPPORTED, what x86 hosts without HMM answer). Like
// the fabric, the mode is optional: an unexpected NVML error or a value this
// build does not know leaves it out (logged) instead of failing the GPU, where
// NVIDIA's driver fails discovery; only the errors that make every other
// query of the GPU fail are returned.
func addressingMode(ctx context.Context, dev nvml.Device, uuid string, calls optionalCalls) (string, error) {
	if !calls.addressingMode {
		return "", nil
	}
	mode, ret := dev.GetAddressingMode()
	switch ret {
	case nvml.SUCCESS:
		if name, ok := addressingModes[nvml.DeviceAddressingModeType(mode.Value)]; ok {
			return name, nil
		}
		klog.FromContext(ctx).Info("NVML reports an addressing mode this plugin does not know, publishing none",
			"uuid", uuid, "mode", mode.Value)
		return "", nil
	case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND:
		return "", nil
	}
	err := nvmlError("get addressing mode", ret)
	if libraryFailure(err) || errors.Is(err, nvml.ERROR_GPU_IS_LOST) || errors.Is(err, nvml.ERROR_RESET_REQUIRED) {
		return "", err
	}
	klog.FromContext(ctx).Error(fmt.Errorf("%w; the GPU is published without addressingMode", err), "Addressing mode unknown", "uuid", uuid)
	return "", nil
}
