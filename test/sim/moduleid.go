package sim

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// The module ID (nvmlDeviceGetModuleId): the number of the GPU's slot on
// an HGX/DGX baseboard, 1..8 on an 8-GPU board. Fabric Manager names the
// GPUs of its partitions by it (fmFabricPartitionGpuInfo_t.physicalId is
// documented as "same value as GPU Module ID"). A profile gives it per GPU:
//
//	devices:
//	  - {pciBusID: "0000:1b:00.0", moduleID: 1}
//
// A GPU without one answers ERROR_NOT_SUPPORTED. nvml.h says the ID "would
// always be 0" on a product that is not on a baseboard; whether such a GPU
// answers SUCCESS with 0 or an error was not checked on hardware, so the
// simulator takes the answer that gives the caller an error to handle, and
// the plugin treats 0 as "no module ID" too. Which module sits at which PCI
// address on a real board was not checked either: the built-in profiles
// number the modules in the order they list the GPUs, and nothing may assume
// that the module ID follows the NVML index. A MIG device's handle has no
// module ID (the mock's default, ERROR_NOT_SUPPORTED). The call is in every
// driver branch the built-in profiles use (R550 and newer).

// maxModuleID bounds a profile's module IDs (FM_MAX_NUM_GPUS is 16).
const maxModuleID = 16

// moduleID answers nvmlDeviceGetModuleId for a GPU.
func (d *device) moduleID() (int, nvml.Return) {
	if d.gpu.ModuleID == 0 {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	return d.gpu.ModuleID, nvml.SUCCESS
}

// checkModuleIDs refuses two GPUs of one profile with the same module ID.
func checkModuleIDs(gpus []GPU) error {
	seen := map[int]string{}
	for _, g := range gpus {
		if g.ModuleID == 0 {
			continue
		}
		if other, dup := seen[g.ModuleID]; dup {
			return fmt.Errorf("gpus: moduleID %d is given to the GPUs at %s and %s; each module of a baseboard has its own",
				g.ModuleID, other, g.PCIBusID)
		}
		seen[g.ModuleID] = g.PCIBusID
	}
	return nil
}
