package discovery

import (
	"errors"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/internal/plugin/model"
)

// Reasons a GPU is unavailable; they are the values of its lost taint
// (gpu.gpudra.io/lost) when it is published from its last known identity.
const (
	ReasonGPUIsLost     = "gpu-is-lost"
	ReasonResetRequired = "reset-required"
	ReasonUnreachable   = "unreachable"
)

// libraryReturns fail for every GPU alike: the library or the plugin's
// access to it is broken, not one GPU. Discovery stops on them.
var libraryReturns = []nvml.Return{
	nvml.ERROR_UNINITIALIZED, nvml.ERROR_DRIVER_NOT_LOADED, nvml.ERROR_LIB_RM_VERSION_MISMATCH,
	nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_FUNCTION_NOT_FOUND, nvml.ERROR_NO_PERMISSION,
}

func libraryFailure(err error) bool {
	for _, r := range libraryReturns {
		if errors.Is(err, r) {
			return true
		}
	}
	return false
}

// LostReason names why a GPU does not answer: gpu-is-lost, reset-required,
// or unreachable for any other error.
func LostReason(err error) string {
	switch {
	case errors.Is(err, nvml.ERROR_GPU_IS_LOST):
		return ReasonGPUIsLost
	case errors.Is(err, nvml.ERROR_RESET_REQUIRED):
		return ReasonResetRequired
	}
	return ReasonUnreachable
}

// unavailable records a GPU discovery could not describe, with whatever
// identity it still read (partial is what describe got before failing).
func unavailable(index int, dev nvml.Device, partial model.GPU, err error) model.UnavailableGPU {
	u := model.UnavailableGPU{Index: index, UUID: partial.UUID, PCIBusID: partial.PCIBusID,
		Reason: LostReason(err), Error: err.Error(), Err: err}
	if u.PCIBusID == "" && dev != nil {
		if pci, ret := dev.GetPciInfo(); ret == nvml.SUCCESS {
			u.PCIBusID, _ = NormalizePCIBusID(pciBusIDString(pci))
		}
	}
	return u
}
