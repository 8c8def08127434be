package discovery

import (
	"context"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/test/sim"
)

// capServer is one GPU of a MIG-capable inline model (profiles 1g.10gb,
// 1g.10gb+me, 7g.80gb) with the given `nvml:` mapping of the simulator.
func capServer(t *testing.T, nvmlYAML string, migEnabled bool) *sim.Server {
	t.Helper()
	mig := "false"
	if migEnabled {
		mig = "true"
	}
	p, err := sim.Parse([]byte(`name: caps
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
  - {model: cap-gpu, migEnabled: ` + mig + `}
`))
	require.NoError(t, err)
	s := sim.NewServer(p, "n")
	require.Equal(t, nvml.SUCCESS, s.Init())
	t.Cleanup(func() { _ = s.Shutdown() })
	return s
}

const allPlacementsFail = `    nvml:
      migProfileErrors:
        - {profile: 1g.10gb, call: GetGpuInstancePossiblePlacements, return: NOT_SUPPORTED}
        - {profile: 1g.10gb+me, call: GetGpuInstancePossiblePlacements, return: INVALID_ARGUMENT}
        - {profile: 7g.80gb, call: GetGpuInstanceProfileInfo, return: NOT_SUPPORTED}`

// Answers real NVML gives on some GPUs (docs/nvml-fidelity.md) do not
// withhold the GPU: a unified-memory GPU's GetMemoryInfo NOT_SUPPORTED, MIG
// geometry queries that fail for some profiles.
func TestDiscoverToleratesNVMLAnswers(t *testing.T) {
	for name, tc := range map[string]struct {
		nvml        string
		migEnabled  bool
		unavailable bool
		memory      uint64
		migCapable  bool
		profiles    []string
	}{
		"x86 default": {nvml: "", memory: 80 << 30, migCapable: true,
			profiles: []string{"1g.10gb", "1g.10gb+me", "7g.80gb"}},
		"unified memory: published without memory or MIG": {nvml: "    nvml: {unifiedMemory: true}"},
		"unified memory in MIG mode: withheld":            {nvml: "    nvml: {unifiedMemory: true}", migEnabled: true, unavailable: true},
		"placements of one profile fail: skipped": {nvml: `    nvml:
      migProfileErrors: [{profile: 1g.10gb+me, call: GetGpuInstancePossiblePlacements, return: NOT_SUPPORTED}]`,
			memory: 80 << 30, migCapable: true, profiles: []string{"1g.10gb", "7g.80gb"}},
		"placements fail INVALID_ARGUMENT, in MIG mode: skipped": {nvml: `    nvml:
      migProfileErrors: [{profile: 1g.10gb, call: GetGpuInstancePossiblePlacements, return: INVALID_ARGUMENT}]`,
			migEnabled: true, memory: 80 << 30, migCapable: true, profiles: []string{"1g.10gb+me", "7g.80gb"}},
		"profile info of one profile fails: skipped": {nvml: `    nvml:
      migProfileErrors: [{profile: 7g.80gb, call: GetGpuInstanceProfileInfo, return: INVALID_ARGUMENT}]`,
			memory: 80 << 30, migCapable: true, profiles: []string{"1g.10gb", "1g.10gb+me"}},
		"no usable profile, MIG off: a whole GPU": {nvml: allPlacementsFail, memory: 80 << 30},
		"no usable profile, MIG mode: withheld":   {nvml: allPlacementsFail, migEnabled: true, unavailable: true},
	} {
		t.Run(name, func(t *testing.T) {
			srv := capServer(t, tc.nvml, tc.migEnabled)
			node, err := Discover(context.Background(), srv, Options{SysfsRoot: t.TempDir()})
			require.NoError(t, err)
			if tc.unavailable {
				require.Empty(t, node.GPUs)
				require.Len(t, node.Unavailable, 1)
				return
			}
			require.Empty(t, node.Unavailable)
			require.Len(t, node.GPUs, 1)
			g := node.GPUs[0]
			require.Equal(t, tc.memory, g.MemoryBytes)
			require.Equal(t, tc.migCapable, g.MIGCapable)
			var names []string
			if g.MIG != nil {
				for _, p := range g.MIG.Profiles {
					names = append(names, p.Name)
				}
			}
			require.ElementsMatch(t, tc.profiles, names)
		})
	}
}
