package sim

import (
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// The addressing mode (nvmlDeviceGetAddressingMode): whether memory the
// CPU allocated (malloc, mmap) is addressable from the GPU, and how: ATS
// (Address Translation Services, Grace's coherent NVLink-C2C: one set of
// page tables for CPU and GPU), HMM (the kernel's heterogeneous memory
// management mirrors the CPU's page tables; x86 hosts with the open kernel
// modules and a kernel that has it) or None (the platform supports a mode,
// none is active). A model's `nvml:` mapping sets the answer:
//
//	nvml:
//	  addressingMode: ats   # not-supported (default), none, hmm or ats
//
// The default answers ERROR_NOT_SUPPORTED, the least kind answer an x86
// host gives (go-nvlib, and NVIDIA's DRA driver with it, publish no
// attribute then); HMM depends on the host's kernel and kernel modules,
// not on the GPU, so no x86 model claims it. nvml.h documents the call
// "For Turing or newer fully supported devices", so an older model may only
// answer NOT_SUPPORTED. A MIG device's handle answers NOT_SUPPORTED (not
// checked on hardware; readers take the parent GPU's mode).
//
// Driver branches (read, not run): the call is in NVML's R590 reference;
// which branch first has it was not checked, so a profile whose driver is
// older than addressingModeBranch lacks the symbol (LookupSymbol) and the
// call answers ERROR_FUNCTION_NOT_FOUND: the least kind assumption.

// AddressingMode is a model's answer to nvmlDeviceGetAddressingMode.
type AddressingMode string

// The addressing modes of an `nvml:` mapping.
const (
	AddressingNotSupported AddressingMode = "not-supported"
	AddressingNone         AddressingMode = "none"
	AddressingHMM          AddressingMode = "hmm"
	AddressingATS          AddressingMode = "ats"
)

// addressingModes maps each mode to NVML's value.
var addressingModes = map[AddressingMode]nvml.DeviceAddressingModeType{
	AddressingNone: nvml.DEVICE_ADDRESSING_MODE_NONE,
	AddressingHMM:  nvml.DEVICE_ADDRESSING_MODE_HMM,
	AddressingATS:  nvml.DEVICE_ADDRESSING_MODE_ATS,
}

// addressingModeBranch is the oldest driver branch whose NVML the simulator
// gives nvmlDeviceGetAddressingMode.
const addressingModeBranch = 580

// AddressingModeSymbol is the NVML function of the addressing mode.
const AddressingModeSymbol = "nvmlDeviceGetAddressingMode"

// AddressingModeV1 is the version of nvmlDeviceAddressingMode_v1_t.
var AddressingModeV1 = nvml.STRUCT_VERSION(nvml.DeviceAddressingMode{}, 1)

func parseAddressingMode(at, s string, arch nvml.DeviceArchitecture) (AddressingMode, error) {
	mode := AddressingMode(strings.ToLower(s))
	_, known := addressingModes[mode]
	switch {
	case s == "" || mode == AddressingNotSupported:
		return AddressingNotSupported, nil
	case !known:
		return "", fmt.Errorf("%s: %q is not one of %s, %s, %s, %s", at, s, AddressingNotSupported, AddressingNone,
			AddressingHMM, AddressingATS)
	case arch < nvml.DEVICE_ARCH_TURING:
		return "", fmt.Errorf("%s: %s only for Turing or newer GPUs", at, mode)
	}
	return mode, nil
}

// addressingMode answers nvmlDeviceGetAddressingMode for a GPU.
func (d *device) addressingMode() (nvml.DeviceAddressingMode, nvml.Return) {
	if !driverAtLeast(d.srv.profile.DriverVersion, addressingModeBranch) {
		return nvml.DeviceAddressingMode{}, nvml.ERROR_FUNCTION_NOT_FOUND
	}
	mode := d.model().NVML.AddressingMode
	if mode == AddressingNotSupported || mode == "" {
		return nvml.DeviceAddressingMode{}, nvml.ERROR_NOT_SUPPORTED
	}
	return nvml.DeviceAddressingMode{Version: AddressingModeV1, Value: uint32(addressingModes[mode])}, nvml.SUCCESS
}
