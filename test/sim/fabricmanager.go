package sim

import (
	"fmt"
	"slices"
)

// NVSwitch Fabric Manager (FM): on an HGX/DGX board whose GPUs talk
// through NVSwitches, nvidia-fabricmanager programs the switches. A
// profile's top-level fabricManager says how the node runs it:
//
//	fabricManager: shared-nvswitch   # none (default), bare-metal or shared-nvswitch
//
// none: no Fabric Manager (no NVSwitch, or the service is not installed);
// bare-metal (FABRIC_MODE=0): every GPU is in one fabric, FM's partition
// calls answer NOT_SUPPORTED; shared-nvswitch (FABRIC_MODE=1, the
// multi-tenancy mode NVIDIA's DRA driver requires for its partitions): FM
// offers the partitions of FabricPartitions and activates them on request.
// The simulated libnvfm (test/fmsim) answers from this and from its state
// file; test/sim only says what the hardware offers.

// FabricManagerMode is a profile's fabricManager.
type FabricManagerMode string

// The Fabric Manager modes of a profile.
const (
	FabricManagerNone           FabricManagerMode = "none"
	FabricManagerBareMetal      FabricManagerMode = "bare-metal"
	FabricManagerSharedNVSwitch FabricManagerMode = "shared-nvswitch"
)

// FabricPartition is one partition Fabric Manager offers in shared NVSwitch
// mode: its ID and the module IDs (GPU.ModuleID, FM's "physical ID") of its
// GPUs.
type FabricPartition struct {
	ID      int
	Modules []int
}

// hgx8GPUPartitions is the default partition table of an 8-GPU HGX H100
// (and H200) board in shared NVSwitch mode, after NVIDIA's Fabric Manager
// user guide: one partition of all eight GPUs, two of four, four of two and
// eight of one. The grouping of the two-GPU partitions ({1,3}, {2,4},
// {5,7}, {6,8}) was written from the guide's HGX H100 table as remembered,
// not re-read against the document; nothing may depend on it beyond what a
// test of the table itself checks.
var hgx8GPUPartitions = []FabricPartition{
	{0, []int{1, 2, 3, 4, 5, 6, 7, 8}},
	{1, []int{1, 2, 3, 4}}, {2, []int{5, 6, 7, 8}},
	{3, []int{1, 3}}, {4, []int{2, 4}}, {5, []int{5, 7}}, {6, []int{6, 8}},
	{7, []int{1}}, {8, []int{2}}, {9, []int{3}}, {10, []int{4}},
	{11, []int{5}}, {12, []int{6}}, {13, []int{7}}, {14, []int{8}},
}

// FabricPartitions is what Fabric Manager offers on the profile's node: the
// HGX 8-GPU table in shared NVSwitch mode, nil otherwise. Each call returns
// a fresh copy.
func (p *Profile) FabricPartitions() []FabricPartition {
	if p.FabricManager != FabricManagerSharedNVSwitch {
		return nil
	}
	out := make([]FabricPartition, len(hgx8GPUPartitions))
	for i, fp := range hgx8GPUPartitions {
		out[i] = FabricPartition{ID: fp.ID, Modules: slices.Clone(fp.Modules)}
	}
	return out
}

// parseFabricManager validates a profile's fabricManager against its GPUs:
// shared NVSwitch mode needs the eight modules of an HGX board, the only
// partition table the simulator has.
func parseFabricManager(s string, gpus []GPU) (FabricManagerMode, error) {
	mode := FabricManagerMode(s)
	switch mode {
	case "", FabricManagerNone:
		return FabricManagerNone, nil
	case FabricManagerBareMetal:
		return mode, nil
	case FabricManagerSharedNVSwitch:
		var modules []int
		for _, g := range gpus {
			if g.ModuleID != 0 {
				modules = append(modules, g.ModuleID)
			}
		}
		slices.Sort(modules)
		if !slices.Equal(modules, []int{1, 2, 3, 4, 5, 6, 7, 8}) {
			return "", fmt.Errorf("fabricManager: %s needs eight GPUs with moduleID 1 to 8 (an HGX 8-GPU board), the profile's modules are %v",
				mode, modules)
		}
		return mode, nil
	}
	return "", fmt.Errorf("fabricManager: %q is not one of %s, %s, %s", s, FabricManagerNone, FabricManagerBareMetal, FabricManagerSharedNVSwitch)
}
