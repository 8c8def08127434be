package discovery

import (
	"context"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/model"
)

// nvlinkDomains groups the GPUs that are fully connected by NVLink and sets
// each group member's NVLinkDomain to the UUID of the group's first GPU.
//
// Two GPUs are linked when NVML reports P2P over NVLink between them
// (nvmlDeviceGetP2PStatus with P2P_CAPS_INDEX_NVLINK), which holds for direct
// links and for NVSwitch systems alike. Groups are cliques, built greedily in
// NVML index order: a GPU joins the first group whose every member it is
// linked to. On fully connected systems (DGX/HGX) that is one group per
// NVSwitch fabric; a partial mesh splits into several groups, so that
// matchAttribute on the domain always yields GPUs linked pairwise.
//
// Topology is optional information: an NVML error leaves the attribute out
// (logged), it never fails discovery.
func nvlinkDomains(ctx context.Context, handles []nvml.Device, gpus []model.GPU) {
	logger := klog.FromContext(ctx)
	n := len(handles)
	linked := make([][]bool, n)
	for i := range linked {
		linked[i] = make([]bool, n)
	}
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			status, ret := handles[i].GetP2PStatus(handles[j], nvml.P2P_CAPS_INDEX_NVLINK)
			switch ret {
			case nvml.SUCCESS:
			case nvml.ERROR_NOT_SUPPORTED:
				continue
			default:
				logger.V(2).Info("NVLink topology unknown, not publishing nvlinkDomain", "gpu", gpus[i].UUID, "peer", gpus[j].UUID,
					"err", ReturnError(ret))
				return
			}
			linked[i][j] = status == nvml.P2P_STATUS_OK
			linked[j][i] = linked[i][j]
		}
	}
	var groups [][]int
	for i := 0; i < n; i++ {
		placed := false
		for g := range groups {
			if linkedToAll(linked, i, groups[g]) {
				groups[g] = append(groups[g], i)
				placed = true
				break
			}
		}
		if !placed {
			groups = append(groups, []int{i})
		}
	}
	for _, g := range groups {
		if len(g) < 2 {
			continue
		}
		for _, i := range g {
			gpus[i].NVLinkDomain = gpus[g[0]].UUID
		}
		logger.V(4).Info("NVLink domain", "domain", gpus[g[0]].UUID, "gpus", len(g))
	}
}

func linkedToAll(linked [][]bool, i int, group []int) bool {
	for _, j := range group {
		if !linked[i][j] {
			return false
		}
	}
	return true
}
