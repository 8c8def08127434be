package sim

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNVLinkValidation(t *testing.T) {
	const head = "name: t\ndriverVersion: \"570.124.06\"\ncudaDriverVersion: \"12.8\"\ngpus:\n  - model: l4\n    count: 3\n"
	tests := []struct {
		name    string
		nvlink  string
		domains []int // per GPU, when valid
		wantErr string
	}{
		{"none", "", []int{0, 0, 0}, ""},
		{"pair", "nvlink:\n  - gpus: [0, 2]\n", []int{1, 0, 1}, ""},
		{"two domains", "nvlink:\n  - gpus: [0, 1]\n  - gpus: [2, 0]\n", nil, "nvlink[1].gpus[1]: GPU 0 is already in nvlink[0]"},
		{"single GPU", "nvlink:\n  - gpus: [1]\n", nil, "nvlink[0].gpus: an NVLink domain needs at least 2 GPUs, got 1"},
		{"out of range", "nvlink:\n  - gpus: [0, 3]\n", nil, "nvlink[0].gpus[1]: GPU index 3 out of range: the profile has GPUs 0-2"},
		{"negative", "nvlink:\n  - gpus: [-1, 0]\n", nil, "GPU index -1 out of range"},
		{"wrong type", "nvlink:\n  - gpus: all\n", nil, "nvlink[0].gpus"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse([]byte(head + tt.nvlink))
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			var got []int
			for _, g := range p.GPUs {
				got = append(got, g.NVLinkDomain)
			}
			assert.Equal(t, tt.domains, got)
		})
	}
}

func TestP2PStatus(t *testing.T) {
	tests := []struct {
		profile string
		a, b    int
		caps    nvml.GpuP2PCapsIndex
		want    nvml.GpuP2PStatus
	}{
		{"dgx-h100", 0, 7, nvml.P2P_CAPS_INDEX_NVLINK, nvml.P2P_STATUS_OK},
		{"dgx-h100", 3, 4, nvml.P2P_CAPS_INDEX_READ, nvml.P2P_STATUS_OK},
		{"dgx-h100", 2, 2, nvml.P2P_CAPS_INDEX_NVLINK, nvml.P2P_STATUS_NOT_SUPPORTED},
		{"mixed", 2, 3, nvml.P2P_CAPS_INDEX_NVLINK, nvml.P2P_STATUS_OK},
		{"mixed", 0, 1, nvml.P2P_CAPS_INDEX_NVLINK, nvml.P2P_STATUS_NOT_SUPPORTED},
		{"mixed", 0, 2, nvml.P2P_CAPS_INDEX_NVLINK, nvml.P2P_STATUS_NOT_SUPPORTED},
		{"mixed", 0, 1, nvml.P2P_CAPS_INDEX_WRITE, nvml.P2P_STATUS_CHIPSET_NOT_SUPPORTED}, // two PCIe roots
		{"dgx-a100", 0, 1, nvml.P2P_CAPS_INDEX_ATOMICS, nvml.P2P_STATUS_OK},
		{"l4", 0, 1, nvml.P2P_CAPS_INDEX_NVLINK, nvml.P2P_STATUS_NOT_SUPPORTED},
	}
	for _, tt := range tests {
		s := newServer(t, tt.profile, "n1")
		a, ret := s.DeviceGetHandleByIndex(tt.a)
		require.Equal(t, nvml.SUCCESS, ret)
		b, ret := s.DeviceGetHandleByIndex(tt.b)
		require.Equal(t, nvml.SUCCESS, ret)
		got, ret := s.DeviceGetP2PStatus(a, b, tt.caps)
		require.Equal(t, nvml.SUCCESS, ret, "%s %d-%d", tt.profile, tt.a, tt.b)
		assert.Equal(t, tt.want, got, "%s %d-%d caps %d", tt.profile, tt.a, tt.b, tt.caps)
		assert.Equal(t, len(s.Profile().NVLinkPeers(tt.a)) > 0, s.Profile().GPUs[tt.a].NVLinkDomain != 0)
	}
	s := newServer(t, "dgx-h100", "n1")
	a, _ := s.DeviceGetHandleByIndex(0)
	_, ret := a.GetP2PStatus(nil, nvml.P2P_CAPS_INDEX_NVLINK)
	assert.Equal(t, nvml.ERROR_INVALID_ARGUMENT, ret, "a handle that is not a GPU of this server")
	assert.Equal(t, []int{1, 2, 3, 4, 5, 6, 7}, s.Profile().NVLinkPeers(0))
}
