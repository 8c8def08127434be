package discovery

import (
	"context"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/test/sim"
)

func TestNVLinkDomainsFromSimulatedProfiles(t *testing.T) {
	tests := []struct {
		profile string
		// want[i] is the index of the GPU whose UUID names GPU i's domain, -1 for none.
		want []int
	}{
		{"dgx-h100", []int{0, 0, 0, 0, 0, 0, 0, 0}},
		{"h200", []int{0, 0, 0, 0}},
		{"mixed", []int{-1, -1, 2, 2}},
		{"l4", []int{-1, -1}},
	}
	for _, tt := range tests {
		t.Run(tt.profile, func(t *testing.T) {
			p, err := sim.Load(tt.profile, nil)
			require.NoError(t, err)
			srv := sim.NewServer(p, "node-a")
			require.Equal(t, nvml.SUCCESS, srv.Init())
			t.Cleanup(func() { _ = srv.Shutdown() })
			node, err := Discover(context.Background(), srv, Options{})
			require.NoError(t, err)
			require.Len(t, node.GPUs, len(tt.want))
			for i, g := range node.GPUs {
				want := ""
				if tt.want[i] >= 0 {
					want = node.GPUs[tt.want[i]].UUID
				}
				assert.Equal(t, want, g.NVLinkDomain, "GPU %d", i)
			}
		})
	}
}

// linkMatrix builds mock GPUs whose NVLink P2P status follows links; a pair
// listed in failing answers an NVML error instead.
func linkMatrix(n int, links [][2]int, failing *[2]int) []nvml.Device {
	devs := make([]*mock.Device, n)
	for i := range devs {
		devs[i] = &mock.Device{}
	}
	idx := func(d nvml.Device) int {
		for i := range devs {
			if devs[i] == d {
				return i
			}
		}
		return -1
	}
	out := make([]nvml.Device, n)
	for i := range devs {
		devs[i].GetP2PStatusFunc = func(other nvml.Device, _ nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
			j := idx(other)
			if failing != nil && (*failing == [2]int{i, j} || *failing == [2]int{j, i}) {
				return nvml.P2P_STATUS_UNKNOWN, nvml.ERROR_UNKNOWN
			}
			for _, l := range links {
				if l == [2]int{i, j} || l == [2]int{j, i} {
					return nvml.P2P_STATUS_OK, nvml.SUCCESS
				}
			}
			return nvml.P2P_STATUS_NOT_SUPPORTED, nvml.SUCCESS
		}
		out[i] = devs[i]
	}
	return out
}

func TestNVLinkDomainsCliques(t *testing.T) {
	tests := []struct {
		name    string
		n       int
		links   [][2]int
		failing *[2]int
		want    []int // index of the domain's naming GPU, -1 for none
	}{
		{"no links", 3, nil, nil, []int{-1, -1, -1}},
		{"two pairs", 4, [][2]int{{0, 1}, {2, 3}}, nil, []int{0, 0, 2, 2}},
		// A ring 0-1-2-3-0 is not fully connected: two linked pairs, never a group of 4.
		{"ring", 4, [][2]int{{0, 1}, {1, 2}, {2, 3}, {3, 0}}, nil, []int{0, 0, 2, 2}},
		{"triangle plus one", 4, [][2]int{{0, 1}, {0, 2}, {1, 2}, {2, 3}}, nil, []int{0, 0, 0, -1}},
		{"NVML error leaves the attribute out", 3, [][2]int{{0, 1}, {1, 2}, {0, 2}}, &[2]int{1, 2}, []int{-1, -1, -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gpus := make([]model.GPU, tt.n)
			for i := range gpus {
				gpus[i].UUID = "GPU-" + string(rune('a'+i))
			}
			nvlinkDomains(context.Background(), linkMatrix(tt.n, tt.links, tt.failing), gpus)
			for i, g := range gpus {
				want := ""
				if tt.want[i] >= 0 {
					want = gpus[tt.want[i]].UUID
				}
				assert.Equal(t, want, g.NVLinkDomain, "GPU %d", i)
			}
		})
	}
}
