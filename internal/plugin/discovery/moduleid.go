package discovery

import (
	"context"
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"
)

// moduleIDSymbol is NVML's module-ID call, looked up before it is made.
const moduleIDSymbol = "nvmlDeviceGetModuleId"

// moduleID reads the GPU's baseboard module number; 0 when the driver lacks
// the call, the GPU has none (NOT_SUPPORTED, or 0: nvml.h says a GPU that is
// not on a baseboard reports 0) or NVML fails unexpectedly (logged; the GPU is
// still published, without the number). Only the errors that make every other
// query of the GPU fail are returned.
func moduleID(ctx context.Context, dev nvml.Device, uuid string, calls optionalCalls) (int, error) {
	if !calls.moduleID {
		return 0, nil
	}
	id, ret := dev.GetModuleId()
	switch ret {
	case nvml.SUCCESS:
		if id < 0 {
			klog.FromContext(ctx).Info("NVML reports a negative module ID, publishing none", "uuid", uuid, "moduleID", id)
			return 0, nil
		}
		return id, nil
	case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND:
		return 0, nil
	}
	err := nvmlError("get module ID", ret)
	if libraryFailure(err) || errors.Is(err, nvml.ERROR_GPU_IS_LOST) || errors.Is(err, nvml.ERROR_RESET_REQUIRED) {
		return 0, err
	}
	klog.FromContext(ctx).Error(fmt.Errorf("%w; the GPU is published without gpuModuleID", err), "Module ID unknown", "uuid", uuid)
	return 0, nil
}
