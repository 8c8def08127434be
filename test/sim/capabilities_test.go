package sim

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// capProfile is a profile with one GPU of an inline model whose `nvml:`
// mapping is nvmlYAML, based on an H100 (MIG-capable).
func capProfile(t *testing.T, nvmlYAML string) *Server {
	t.Helper()
	p, err := Parse([]byte(`name: caps
driverVersion: "570.124.06"
cudaDriverVersion: "12.8"
models:
  - name: cap-gpu
    productName: NVIDIA Capable
    architecture: Hopper
    computeCapability: "9.0"
    memory: 80Gi
    pciDeviceID: 0x233010DE
    migCapable: true
    mig:
      memorySlices: 8
      gpuInstanceProfiles:
        - {name: 1g.10gb, nvmlProfile: 1_SLICE, id: 19, slices: 1, memory: 9984Mi, placementSize: 1, placements: [0, 1, 2, 3, 4, 5, 6]}
        - {name: 1g.10gb+me, nvmlProfile: 1_SLICE_REV1, id: 20, slices: 1, memory: 9984Mi, instances: 1, placementSize: 1, placements: [0, 1, 2, 3, 4, 5, 6]}
        - {name: 7g.80gb, nvmlProfile: 7_SLICE, id: 0, slices: 7, memory: 81152Mi, placementSize: 8, placements: [0]}
` + nvmlYAML + `
gpus:
  - {model: cap-gpu, numaNode: 1}
  - {model: cap-gpu, numaNode: 3}
`))
	require.NoError(t, err)
	s := NewServer(p, "n")
	require.Equal(t, nvml.SUCCESS, s.Init())
	t.Cleanup(func() { _ = s.Shutdown() })
	return s
}

func TestCapabilities(t *testing.T) {
	type answers struct {
		numa        []int // per GPU; nil: NOT_SUPPORTED
		memory      nvml.Return
		info1gme    nvml.Return // GetGpuInstanceProfileInfo(1_SLICE_REV1)
		placements1 nvml.Return // GetGpuInstancePossiblePlacements(1g.10gb)
	}
	x86 := answers{memory: nvml.SUCCESS, info1gme: nvml.SUCCESS, placements1: nvml.SUCCESS}
	for name, tc := range map[string]struct {
		nvml string
		want answers
	}{
		"no nvml mapping: x86":   {"", x86},
		"explicit not-supported": {"    nvml: {numaNodeId: not-supported}", x86},
		"grace: GPU memory nodes after the CPU nodes": {"    nvml: {numaNodeId: gpu-memory}",
			answers{numa: []int{4, 5}, memory: nvml.SUCCESS, info1gme: nvml.SUCCESS, placements1: nvml.SUCCESS}},
		"unified memory": {"    nvml: {unifiedMemory: true}",
			answers{memory: nvml.ERROR_NOT_SUPPORTED, info1gme: nvml.SUCCESS, placements1: nvml.SUCCESS}},
		"MIG geometry errors": {`    nvml:
      migProfileErrors:
        - {profile: 1g.10gb+me, call: GetGpuInstanceProfileInfo, return: INVALID_ARGUMENT}
        - {profile: 1g.10gb, call: GetGpuInstancePossiblePlacements, return: NOT_SUPPORTED}`,
			answers{memory: nvml.SUCCESS, info1gme: nvml.ERROR_INVALID_ARGUMENT, placements1: nvml.ERROR_NOT_SUPPORTED}},
	} {
		t.Run(name, func(t *testing.T) {
			s := capProfile(t, tc.nvml)
			for i := range 2 {
				d, ret := s.DeviceGetHandleByIndex(i)
				require.Equal(t, nvml.SUCCESS, ret)
				numa, ret := d.GetNumaNodeId()
				if tc.want.numa == nil {
					assert.Equal(t, nvml.ERROR_NOT_SUPPORTED, ret, "GetNumaNodeId")
				} else {
					assert.Equal(t, nvml.SUCCESS, ret, "GetNumaNodeId")
					assert.Equal(t, tc.want.numa[i], numa)
				}
				pciNUMA, _ := s.PCINUMANode(s.Profile().GPUs[i].PCIBusID)
				assert.Equal(t, []int{1, 3}[i], pciNUMA, "the PCI device's node never changes")
				_, ret = d.GetMemoryInfo()
				assert.Equal(t, tc.want.memory, ret, "GetMemoryInfo")
				_, ret = d.GetMemoryInfo_v2()
				assert.Equal(t, tc.want.memory, ret, "GetMemoryInfo_v2")
				_, ret = d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1)
				assert.Equal(t, tc.want.info1gme, ret, "GetGpuInstanceProfileInfo(1g.10gb+me)")
				info, ret := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
				require.Equal(t, nvml.SUCCESS, ret)
				_, ret = d.GetGpuInstancePossiblePlacements(&info)
				assert.Equal(t, tc.want.placements1, ret, "GetGpuInstancePossiblePlacements(1g.10gb)")
			}
		})
	}
}

// A lost GPU answers GPU_IS_LOST also for the calls the mapping changes.
func TestCapabilitiesLost(t *testing.T) {
	s := capProfile(t, "    nvml: {numaNodeId: gpu-memory, unifiedMemory: true}")
	d, _ := s.DeviceGetHandleByIndex(0)
	uuid, _ := d.GetUUID()
	require.NoError(t, s.SetLost(uuid, true))
	_, ret := d.GetNumaNodeId()
	assert.Equal(t, nvml.ERROR_GPU_IS_LOST, ret)
	_, ret = d.GetMemoryInfo()
	assert.Equal(t, nvml.ERROR_GPU_IS_LOST, ret)
}

func TestCapabilitiesInvalid(t *testing.T) {
	for name, tc := range map[string]struct{ nvml, want string }{
		"numaNodeId": {"    nvml: {numaNodeId: cpu}", `models[0].nvml.numaNodeId: "cpu" is neither`},
		"profile":    {"    nvml: {migProfileErrors: [{profile: 2g.20gb, call: GetGpuInstanceProfileInfo, return: NOT_SUPPORTED}]}", `models[0].nvml.migProfileErrors[0].profile: the model has no GPU instance profile "2g.20gb"`},
		"call":       {"    nvml: {migProfileErrors: [{profile: 1g.10gb, call: CreateGpuInstance, return: NOT_SUPPORTED}]}", `models[0].nvml.migProfileErrors[0].call: "CreateGpuInstance" is not one of`},
		"return":     {"    nvml: {migProfileErrors: [{profile: 1g.10gb, call: GetGpuInstanceProfileInfo, return: UNKNOWN}]}", `models[0].nvml.migProfileErrors[0].return: "UNKNOWN" is not one of`},
		"unknown":    {"    nvml: {numaNode: 1}", `unknown field`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(`name: caps
driverVersion: "570.124.06"
cudaDriverVersion: "12.8"
models:
  - name: cap-gpu
    productName: NVIDIA Capable
    architecture: Hopper
    computeCapability: "9.0"
    memory: 80Gi
    pciDeviceID: 0x233010DE
    migCapable: true
    mig:
      memorySlices: 8
      gpuInstanceProfiles:
        - {name: 1g.10gb, nvmlProfile: 1_SLICE, id: 19, slices: 1, memory: 9984Mi, placementSize: 1, placements: [0]}
` + tc.nvml + `
gpus: [{model: cap-gpu}]
`))
			require.ErrorContains(t, err, tc.want)
		})
	}
}
