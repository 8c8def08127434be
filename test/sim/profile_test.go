package sim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const gi = 1 << 30

func TestBuiltinProfiles(t *testing.T) {
	require.Equal(t, []string{"dgx-a100", "dgx-h100", "gb200-nvl72-tray", "gh200", "h200", "hgx-b200", "l4", "mixed"}, Builtin())

	a100 := expectGPU{"NVIDIA A100-SXM4-40GB", 40 * gi, nvml.DEVICE_ARCH_AMPERE, 8, 0, true}
	h100 := expectGPU{"NVIDIA H100 80GB HBM3", 80 * gi, nvml.DEVICE_ARCH_HOPPER, 9, 0, true}
	h200 := expectGPU{"NVIDIA H200", 141 * gi, nvml.DEVICE_ARCH_HOPPER, 9, 0, true}
	l4 := expectGPU{"NVIDIA L4", 23034 * mib, nvml.DEVICE_ARCH_ADA, 8, 9, false}
	gb200 := expectGPU{"NVIDIA GB200", 189471 * mib, nvml.DEVICE_ARCH_BLACKWELL, 10, 0, true}
	tests := []struct {
		name     string
		driver   string
		cuda     int
		gpus     []expectGPU
		numa     []int
		busIDs   []string
		distinct int // number of distinct PCIe roots
	}{
		{"dgx-a100", "550.90.07", 12040, repeat(a100, 8), []int{0, 0, 0, 0, 1, 1, 1, 1},
			[]string{"0000:07:00.0", "0000:0f:00.0", "0000:47:00.0", "0000:4e:00.0", "0000:87:00.0", "0000:90:00.0", "0000:b7:00.0", "0000:bd:00.0"}, 4},
		{"dgx-h100", "570.124.06", 12080, repeat(h100, 8), []int{0, 0, 0, 0, 1, 1, 1, 1},
			[]string{"0000:1b:00.0", "0000:43:00.0", "0000:52:00.0", "0000:61:00.0", "0000:9d:00.0", "0000:c3:00.0", "0000:d1:00.0", "0000:df:00.0"}, 8},
		{"h200", "570.133.20", 12080, repeat(h200, 4), []int{0, 0, 1, 1},
			[]string{"0000:18:00.0", "0000:2a:00.0", "0000:9b:00.0", "0000:ab:00.0"}, 2},
		{"gb200-nvl72-tray", "580.82.07", 13000, repeat(gb200, 4), []int{0, 0, 1, 1},
			[]string{"0008:01:00.0", "0009:01:00.0", "0018:01:00.0", "0019:01:00.0"}, 4},
		{"l4", "550.127.05", 12040, repeat(l4, 2), []int{0, 0}, []string{"0000:17:00.0", "0000:65:00.0"}, 2},
		{"mixed", "565.57.01", 12070, []expectGPU{l4, l4, a100, a100}, []int{0, 0, 1, 1},
			[]string{"0000:17:00.0", "0000:31:00.0", "0000:b1:00.0", "0000:b5:00.0"}, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Load(tc.name, nil)
			require.NoError(t, err)
			assert.Equal(t, tc.name, p.Name)
			assert.NotEmpty(t, p.Description)
			assert.Equal(t, "builtin", p.Source)
			assert.Equal(t, tc.driver, p.DriverVersion)
			assert.Equal(t, tc.cuda, p.CUDADriverVersion)
			require.Len(t, p.GPUs, len(tc.gpus))
			roots := map[string]bool{}
			for i, g := range p.GPUs {
				want := tc.gpus[i]
				assert.Equal(t, i, g.Index)
				assert.Equal(t, want.product, g.Model.ProductName)
				assert.Equal(t, want.memory, g.Model.MemoryBytes)
				assert.Equal(t, want.arch, g.Model.Architecture)
				assert.Equal(t, []int{want.ccMajor, want.ccMinor}, []int{g.Model.ComputeCapabilityMajor, g.Model.ComputeCapabilityMinor})
				assert.Equal(t, want.mig, g.Model.MIGCapable())
				assert.False(t, g.MIGEnabled, "built-in profiles start with MIG disabled")
				assert.Equal(t, tc.numa[i], g.NUMANode)
				assert.Equal(t, tc.busIDs[i], g.PCIBusID)
				assert.NotEmpty(t, g.PCIeRoot)
				roots[g.PCIeRoot] = true
			}
			assert.Len(t, roots, tc.distinct)
		})
	}
}

type expectGPU struct {
	product          string
	memory           uint64
	arch             nvml.DeviceArchitecture
	ccMajor, ccMinor int
	mig              bool
}

func repeat[T any](v T, n int) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func TestBuiltinModels(t *testing.T) {
	names := BuiltinModels()
	for _, want := range []string{"a100-sxm4-40gb", "a100-sxm4-80gb", "h100-sxm5-80gb", "h200-sxm-141gb", "l4", "l40s"} {
		assert.Contains(t, names, want)
	}
	models, err := builtinModels()
	require.NoError(t, err)
	mig := map[string][]string{
		"a100-sxm4-40gb": {"1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb", "1g.5gb+me", "1g.10gb"},
		"a100-sxm4-80gb": {"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.10gb+me", "1g.20gb"},
		"h100-sxm5-80gb": {"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.10gb+me", "1g.20gb"},
		"h200-sxm-141gb": {"1g.18gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb", "1g.18gb+me", "1g.35gb"},
	}
	for name, profiles := range mig {
		m := models[name]
		require.NotNil(t, m.MIG, name)
		assert.Equal(t, profiles, migProfileNames(m.MIG), name) // ordered by NVML profile index
		assert.Equal(t, 8, m.MIG.MemorySlices)
		assert.Equal(t, 7, m.MIG.ComputeSlices)
		assert.Equal(t, 7, m.MIG.MaxDevices)
		for _, p := range m.MIG.GPUInstanceProfiles {
			assert.LessOrEqual(t, p.MemoryMiB*mib, m.MemoryBytes, "%s %s", name, p.Name)
		}
	}
}

func TestLoadUserProfile(t *testing.T) {
	dir := t.TempDir()
	user := `
description: a user-defined node
driverVersion: "580.65.06"
cudaDriverVersion: 13.0
models:
  - name: my-gpu
    productName: NVIDIA Imaginary 48GB
    architecture: Blackwell
    computeCapability: 12.0
    memory: 48Gi
    pciDeviceID: 0x2BB110DE
gpus:
  - model: my-gpu
    count: 3
    devices:
      - {pciBusID: "0000:02:00.0", numaNode: -1}
  - model: h100-sxm5-80gb
    pciBusID: "00000000:01:00.0"
    migEnabled: true
    migDevices: [3g.40gb, 3g.40gb]
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "my-node.yaml"), []byte(user), 0o600))

	p, err := Load("my-node", []string{t.TempDir(), dir})
	require.NoError(t, err)
	assert.Equal(t, "my-node", p.Name, "the name defaults to the file name")
	assert.Equal(t, filepath.Join(dir, "my-node.yaml"), p.Source)
	assert.Equal(t, 13000, p.CUDADriverVersion)
	require.Len(t, p.GPUs, 4)
	// Sorted by bus ID; the GPUs without one get the lowest free bus numbers.
	busIDs := []string{p.GPUs[0].PCIBusID, p.GPUs[1].PCIBusID, p.GPUs[2].PCIBusID, p.GPUs[3].PCIBusID}
	assert.Equal(t, []string{"0000:01:00.0", "0000:02:00.0", "0000:03:00.0", "0000:04:00.0"}, busIDs)
	assert.Equal(t, "h100-sxm5-80gb", p.GPUs[0].Model.Name)
	assert.True(t, p.GPUs[0].MIGEnabled)
	assert.Equal(t, []string{"3g.40gb", "3g.40gb"}, p.GPUs[0].MIGDevices)
	my := p.GPUs[1].Model
	assert.Equal(t, "NVIDIA Imaginary 48GB", my.ProductName)
	assert.Equal(t, nvml.BRAND_NVIDIA, my.Brand)
	assert.Equal(t, nvml.DeviceArchitecture(nvml.DEVICE_ARCH_BLACKWELL), my.Architecture)
	assert.Equal(t, []int{12, 0}, []int{my.ComputeCapabilityMajor, my.ComputeCapabilityMinor})
	assert.Equal(t, uint32(0x2BB110DE), my.PCIDeviceID)
	assert.Equal(t, -1, p.GPUs[1].NUMANode)
	assert.Equal(t, 0, p.GPUs[2].NUMANode)

	// The same file by path, and a user profile shadowing a built-in name.
	byPath, err := Load(filepath.Join(dir, "my-node.yaml"), nil)
	require.NoError(t, err)
	assert.Len(t, byPath.GPUs, 4)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "l4.yaml"), []byte(user), 0o600))
	shadow, err := Load("l4", []string{dir})
	require.NoError(t, err)
	assert.Equal(t, "l4", shadow.Name)
	assert.Len(t, shadow.GPUs, 4)
}

func TestLoadErrors(t *testing.T) {
	_, err := Load("dgx-h1000", []string{"/nonexistent"})
	require.Error(t, err)
	for _, name := range Builtin() {
		assert.Contains(t, err.Error(), name)
	}
	assert.Contains(t, err.Error(), `"dgx-h1000"`)
	assert.Contains(t, err.Error(), "/nonexistent")

	_, err = Load("", nil)
	assert.ErrorContains(t, err, "dgx-a100")

	_, err = Load("../etc/passwd", nil)
	assert.ErrorContains(t, err, "reading simulation profile")

	_, err = Load("Bad Name", nil)
	assert.ErrorContains(t, err, "not a valid simulation profile name")

	dir := t.TempDir()
	bad := filepath.Join(dir, "broken.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("name: broken\nfoo: 1\n"), 0o600))
	_, err = Load("broken", []string{dir})
	assert.ErrorContains(t, err, bad)
	assert.ErrorContains(t, err, "foo: unknown field")
}

func TestBuiltinProfilesAreTidy(t *testing.T) {
	for _, name := range Builtin() {
		data, err := profileFiles.ReadFile("profiles/" + name + ".yaml")
		require.NoError(t, err)
		p, err := Parse(data)
		require.NoError(t, err, "built-in profiles must name themselves")
		assert.Equal(t, name, p.Name)
	}
}

// TestReadmeExample keeps the documented example valid.
func TestReadmeExample(t *testing.T) {
	readme, err := os.ReadFile("profiles/README.md")
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(readme), "## Full example\n\n```yaml\n")
	require.True(t, ok)
	example, _, ok := strings.Cut(rest, "```")
	require.True(t, ok)
	p, err := Parse([]byte(example))
	require.NoError(t, err)
	assert.Equal(t, "lab-node", p.Name)
	require.Len(t, p.GPUs, 3)
	// The L4 got the lowest free bus number, so it comes first.
	assert.Equal(t, "my-l4", p.GPUs[0].Model.Name)
	assert.Equal(t, "0000:01:00.0", p.GPUs[0].PCIBusID)
	assert.Equal(t, 1, p.GPUs[0].NUMANode)
	assert.Equal(t, []string{"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"}, p.GPUs[1].MIGDevices)

	s := NewServer(p, "n1")
	require.Equal(t, nvml.SUCCESS, s.Init())
	l4, _ := s.DeviceGetHandleByIndex(0)
	part, ret := l4.GetBoardPartNumber()
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Equal(t, "900-2G193-0000-001", part)
	h100, _ := s.DeviceGetHandleByPciBusId("0000:1b:00.0")
	for i := range 4 {
		_, ret := h100.GetMigDeviceHandleByIndex(i)
		assert.Equal(t, nvml.SUCCESS, ret)
	}
}
