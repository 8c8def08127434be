package sim

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NVLink topology of a profile. A profile lists NVLink domains: groups of
// GPUs (by NVML index) that are fully connected by NVLink, directly or
// through NVSwitch, e.g. all 8 GPUs of a DGX H100, or a bridged pair of
// PCIe cards. The simulated GPUs answer nvmlDeviceGetP2PStatus from it:
//   - P2P_CAPS_INDEX_NVLINK: OK between two GPUs of one domain;
//   - read/write/atomics/prop: OK over NVLink (same domain) or over PCIe
//     when both GPUs sit behind the same PCIe root; CHIPSET_NOT_SUPPORTED
//     otherwise.
// Partial topologies (hybrid cube-mesh) are written as several domains.

// nvlinkSpec is one entry of a profile's nvlink list.
type nvlinkSpec struct {
	GPUs []int `json:"gpus"`
}

// validateNVLink checks the nvlink list against the profile's GPUs (in NVML
// index order) and returns the domain number of each GPU: 1 + the index in
// the list, 0 for none.
func validateNVLink(specs []nvlinkSpec, gpus int) ([]int, error) {
	domain := make([]int, gpus)
	for d, s := range specs {
		if len(s.GPUs) < 2 {
			return nil, fmt.Errorf("nvlink[%d].gpus: an NVLink domain needs at least 2 GPUs, got %d", d, len(s.GPUs))
		}
		for j, idx := range s.GPUs {
			if idx < 0 || idx >= gpus {
				return nil, fmt.Errorf("nvlink[%d].gpus[%d]: GPU index %d out of range: the profile has GPUs 0-%d (NVML index order, i.e. PCI bus ID order)",
					d, j, idx, gpus-1)
			}
			if domain[idx] != 0 {
				return nil, fmt.Errorf("nvlink[%d].gpus[%d]: GPU %d is already in nvlink[%d]; a GPU belongs to one NVLink domain",
					d, j, idx, domain[idx]-1)
			}
			domain[idx] = d + 1
		}
	}
	return domain, nil
}

// NVLinkPeers returns the indices of the GPUs that share an NVLink domain
// with GPU index (not including it), in index order.
func (p *Profile) NVLinkPeers(index int) []int {
	if index < 0 || index >= len(p.GPUs) || p.GPUs[index].NVLinkDomain == 0 {
		return nil
	}
	var out []int
	for i := range p.GPUs {
		if i != index && p.GPUs[i].NVLinkDomain == p.GPUs[index].NVLinkDomain {
			out = append(out, i)
		}
	}
	return out
}

func (d *device) setNVLinkFuncs() {
	d.GetP2PStatusFunc = func(other nvml.Device, caps nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
		peer, ok := other.(*device)
		if !ok || peer.srv != d.srv {
			// MIG device handles and foreign handles: NVML rejects them too.
			return nvml.P2P_STATUS_UNKNOWN, nvml.ERROR_INVALID_ARGUMENT
		}
		nvlink := d.gpu.NVLinkDomain != 0 && d.gpu.NVLinkDomain == peer.gpu.NVLinkDomain && peer != d
		switch caps {
		case nvml.P2P_CAPS_INDEX_NVLINK:
			if nvlink {
				return nvml.P2P_STATUS_OK, nvml.SUCCESS
			}
			return nvml.P2P_STATUS_NOT_SUPPORTED, nvml.SUCCESS
		case nvml.P2P_CAPS_INDEX_READ, nvml.P2P_CAPS_INDEX_WRITE, nvml.P2P_CAPS_INDEX_ATOMICS, nvml.P2P_CAPS_INDEX_PROP:
			if nvlink || (d.gpu.PCIeRoot != "" && d.gpu.PCIeRoot == peer.gpu.PCIeRoot) {
				return nvml.P2P_STATUS_OK, nvml.SUCCESS
			}
			return nvml.P2P_STATUS_CHIPSET_NOT_SUPPORTED, nvml.SUCCESS
		default:
			return nvml.P2P_STATUS_UNKNOWN, nvml.ERROR_INVALID_ARGUMENT
		}
	}
}
