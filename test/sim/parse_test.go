package sim

import (
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const header = `name: test
driverVersion: "550.90.07"
cudaDriverVersion: "12.4"
`

const myModel = `models:
  - name: my-gpu
    productName: My GPU
    architecture: Hopper
    computeCapability: "9.0"
    memory: 8Gi
    pciDeviceID: "0x233010DE"
`

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want []string // substrings of the error
	}{
		{"unknown top-level field", header + "gpu: []\n",
			[]string{"gpu: unknown field", "known fields:", "gpus"}},
		{"unknown nested field", header + "gpus:\n  - model: l4\n    devices:\n      - {pcieroot: pci0000:00}\n",
			[]string{"gpus[0].devices[0].pcieroot: unknown field", "pcieRoot"}},
		{"unknown model", header + "gpus:\n  - model: l4\n  - model: h1000\n",
			[]string{`gpus[1].model: unknown model "h1000"`, "known:", "h100-sxm5-80gb", "l4"}},
		{"missing model", header + "gpus:\n  - count: 2\n",
			[]string{"gpus[0].model: required"}},
		{"bad memory quantity", header + strings.Replace(myModel, "8Gi", "80GB", 1) + "gpus: [{model: my-gpu}]\n",
			[]string{"models[0].memory:", `"80GB"`, "80Gi"}},
		{"missing memory", header + strings.Replace(myModel, "    memory: 8Gi\n", "", 1) + "gpus: [{model: my-gpu}]\n",
			[]string{"models[0].memory: required"}},
		{"duplicate bus IDs", header + "gpus:\n  - model: l4\n    pciBusID: \"0000:07:00.0\"\n  - model: l4\n    count: 2\n    devices:\n      - {pciBusID: \"00000000:07:00.0\"}\n",
			[]string{"gpus[1].devices[0].pciBusID: bus ID 0000:07:00.0 is already used by gpus[0].pciBusID"}},
		{"bad bus ID", header + "gpus: [{model: l4, pciBusID: \"0000:zz:00.0\"}]\n",
			[]string{"gpus[0].pciBusID:", "not a PCI address"}},
		{"group bus ID with count", header + "gpus: [{model: l4, count: 2, pciBusID: \"0000:01:00.0\"}]\n",
			[]string{"gpus[0].pciBusID: only allowed for a single GPU"}},
		{"too many devices", header + "gpus: [{model: l4, count: 1, devices: [{}, {}]}]\n",
			[]string{"gpus[0].devices: lists 2 devices but count is 1"}},
		{"zero count", header + "gpus: [{model: l4, count: 0}]\n",
			[]string{"gpus[0].count: must be between 1 and 64"}},
		{"no GPUs", header, []string{"gpus: list at least one GPU"}},
		{"module ID out of range", header + "gpus: [{model: l4, moduleID: 0}]\n",
			[]string{"gpus[0].moduleID: must be a baseboard module number between 1 and 16"}},
		{"unknown fabric manager mode", header + "fabricManager: partitioned\ngpus: [{model: l4}]\n",
			[]string{`fabricManager: "partitioned" is not one of none, bare-metal, shared-nvswitch`}},
		{"shared NVSwitch without an HGX board", header + "fabricManager: shared-nvswitch\ngpus: [{model: h100-sxm5-80gb, count: 2, devices: [{moduleID: 1}, {moduleID: 2}]}]\n",
			[]string{"fabricManager: shared-nvswitch needs eight GPUs with moduleID 1 to 8", "[1 2]"}},
		{"duplicate module IDs", header + "gpus: [{model: l4, count: 2, devices: [{moduleID: 3}, {moduleID: 3}]}]\n",
			[]string{"moduleID 3 is given to the GPUs at 0000:01:00.0 and 0000:02:00.0"}},
		{"wrong type", header + "gpus: [{model: l4, numaNode: zero}]\n",
			[]string{"gpus[0].numaNode: expected an integer", `"zero"`}},
		{"numa out of range", header + "gpus: [{model: l4, numaNode: -2}]\n",
			[]string{"gpus[0].numaNode: must be a NUMA node number"}},
		{"bad pcie root", header + "gpus: [{model: l4, pcieRoot: \"0000:00\"}]\n",
			[]string{"gpus[0].pcieRoot:", "pci0000:00"}},
		{"MIG on a non-MIG GPU", header + "gpus: [{model: l4, migEnabled: true}]\n",
			[]string{`gpus[0].migEnabled: model "l4" is not MIG-capable`}},
		{"unknown MIG profile", header + "gpus: [{model: h100-sxm5-80gb, migEnabled: true, migDevices: [3g.20gb]}]\n",
			[]string{`gpus[0].migDevices[0]: unknown MIG profile "3g.20gb"`, "3g.40gb"}},
		{"MIG devices need MIG mode", header + "gpus: [{model: h100-sxm5-80gb, migDevices: [7g.80gb]}]\n",
			[]string{"migDevices needs migEnabled: true"}},
		{"MIG devices do not fit", header + "gpus: [{model: h100-sxm5-80gb, migEnabled: true, migDevices: [4g.40gb, 4g.40gb]}]\n",
			[]string{"do not fit", "no room left for 4g.40gb"}},
		{"missing driver version", "name: test\ncudaDriverVersion: \"12.4\"\ngpus: [{model: l4}]\n",
			[]string{"driverVersion:", "550.90.07"}},
		{"bad CUDA version", "name: test\ndriverVersion: \"550.90.07\"\ncudaDriverVersion: twelve\ngpus: [{model: l4}]\n",
			[]string{`cudaDriverVersion: "twelve"`}},
		{"missing name", "driverVersion: \"550.90.07\"\ncudaDriverVersion: \"12.4\"\ngpus: [{model: l4}]\n",
			[]string{"name:", "not a valid profile name"}},
		{"duplicate key", header + "name: again\ngpus: [{model: l4}]\n",
			[]string{"invalid YAML", "name"}},
		{"empty document", "", []string{"empty"}},
		{"not a mapping", "- 1\n", []string{"document: expected a mapping"}},
		{"duplicate model", header + myModel + strings.TrimPrefix(myModel, "models:\n") + "gpus: [{model: my-gpu}]\n",
			[]string{"models[1].name: model \"my-gpu\" is defined twice"}},
		{"unknown architecture", header + strings.Replace(myModel, "Hopper", "Hoppr", 1) + "gpus: [{model: my-gpu}]\n",
			[]string{`models[0].architecture: unknown architecture "Hoppr"`, "hopper"}},
		{"mig without migCapable", header + strings.Replace(myModel, "    pciDeviceID", "    mig: {memorySlices: 8}\n    pciDeviceID", 1) + "gpus: [{model: my-gpu}]\n",
			[]string{"models[0].mig: only allowed when migCapable is true"}},
		{"misaligned placement", header + strings.Replace(myModel, "    pciDeviceID", `    migCapable: true
    mig:
      memorySlices: 8
      gpuInstanceProfiles:
        - {name: 2g.2gb, nvmlProfile: 2_SLICE, id: 14, slices: 2, memory: 2Gi, placementSize: 2, placements: [0, 3]}
    pciDeviceID`, 1) + "gpus: [{model: my-gpu}]\n",
			[]string{"models[0].mig.gpuInstanceProfiles[0].placements[1]: start 3 must be a unique multiple of placementSize (2)"}},
		{"unknown NVML profile", header + strings.Replace(myModel, "    pciDeviceID", `    migCapable: true
    mig:
      memorySlices: 8
      gpuInstanceProfiles:
        - {name: 2g.2gb, nvmlProfile: 2_SLICES, id: 14, slices: 2, memory: 2Gi, placementSize: 2, placements: [0]}
    pciDeviceID`, 1) + "gpus: [{model: my-gpu}]\n",
			[]string{`models[0].mig.gpuInstanceProfiles[0].nvmlProfile: unknown NVML GPU instance profile "2_SLICES"`, "1_SLICE_REV1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			require.Error(t, err)
			for _, want := range tc.want {
				assert.Contains(t, err.Error(), want)
			}
		})
	}
}

func TestParseAcceptsNumbersAndForms(t *testing.T) {
	doc := `name: forms
driverVersion: "535.183.01"
cudaDriverVersion: 12.2
models:
  - name: my-gpu
    productName: My GPU
    brand: Tesla
    architecture: ampere
    computeCapability: 8.6
    memory: 25769803776
    pciDeviceID: 0x2236
gpus:
  - model: my-gpu
    devices:
      - {pciBusID: "00000000:3B:00.0", pcieRoot: PCI0000:3A}
      - {pciBusID: "3c:00.0"}
`
	p, err := Parse([]byte(doc))
	require.NoError(t, err)
	assert.Equal(t, 12020, p.CUDADriverVersion)
	assert.Equal(t, "12.2", p.CUDAVersionString())
	require.Len(t, p.GPUs, 2, "count defaults to the number of devices")
	assert.Equal(t, "0000:3b:00.0", p.GPUs[0].PCIBusID)
	assert.Equal(t, "pci0000:3a", p.GPUs[0].PCIeRoot)
	assert.Equal(t, "0000:3c:00.0", p.GPUs[1].PCIBusID)
	m := p.GPUs[0].Model
	assert.Equal(t, uint64(24<<30), m.MemoryBytes)
	assert.Equal(t, uint32(0x2236), m.PCIDeviceID)
	assert.Equal(t, 8, m.ComputeCapabilityMajor)
	assert.Equal(t, 6, m.ComputeCapabilityMinor)
	assert.False(t, m.MIGCapable())
}

func TestPCIAddress(t *testing.T) {
	for in, want := range map[string]string{
		"0000:1b:00.0":     "0000:1b:00.0",
		"00000000:1B:00.0": "0000:1b:00.0",
		"1b:00.0":          "0000:1b:00.0",
		"0001:c3:1f.7":     "0001:c3:1f.7",
	} {
		a, err := parsePCIAddress(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, a.String())
	}
	a, _ := parsePCIAddress("0000:1b:00.0")
	assert.Equal(t, "00000000:1B:00.0", a.nvmlBusID())
	assert.Equal(t, "0000:1B:00.0", a.nvmlBusIDLegacy())
	for _, bad := range []string{"", "1b", "0000:1b:00", "0000:1b:20.0", "0000:1b:00.8", "000000000:1b:00.0", "0000:123:00.0"} {
		_, err := parsePCIAddress(bad)
		assert.Error(t, err, bad)
	}
}

// ECC mode: the model's default, overridden per GPU; NVML's answer follows
// it, and a model without eccEnabled has no ECC at all.
func TestECCMode(t *testing.T) {
	for _, tc := range []struct {
		name string
		doc  string
		want []nvml.Return // per GPU: SUCCESS (see on) or NOT_SUPPORTED
		on   []bool
	}{
		{"built-in default", header + "gpus: [{model: l4, count: 2}]\n",
			[]nvml.Return{nvml.SUCCESS, nvml.SUCCESS}, []bool{true, true}},
		{"one GPU turned off", header + "gpus:\n  - model: h100-sxm5-80gb\n    count: 2\n    devices: [{}, {eccEnabled: false}]\n",
			[]nvml.Return{nvml.SUCCESS, nvml.SUCCESS}, []bool{true, false}},
		{"group turned off, one back on", header + "gpus:\n  - model: l4\n    count: 2\n    eccEnabled: false\n    devices: [{eccEnabled: true}]\n",
			[]nvml.Return{nvml.SUCCESS, nvml.SUCCESS}, []bool{true, false}},
		{"model without ECC", header + myModel + "gpus: [{model: my-gpu}]\n",
			[]nvml.Return{nvml.ERROR_NOT_SUPPORTED}, []bool{false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse([]byte(tc.doc))
			require.NoError(t, err)
			srv := NewServer(p, "node-a")
			require.Equal(t, nvml.SUCCESS, srv.Init())
			defer func() { _ = srv.Shutdown() }()
			for i := range tc.want {
				d, ret := srv.DeviceGetHandleByIndex(i)
				require.Equal(t, nvml.SUCCESS, ret)
				cur, pending, ret := d.GetEccMode()
				require.Equal(t, tc.want[i], ret, "GPU %d", i)
				if ret == nvml.SUCCESS {
					require.Equal(t, tc.on[i], cur == nvml.FEATURE_ENABLED, "GPU %d current", i)
					require.Equal(t, cur, pending, "GPU %d: nothing is pending", i)
				}
			}
		})
	}
	_, err := Parse([]byte(header + myModel + "gpus: [{model: my-gpu, eccEnabled: true}]\n"))
	require.ErrorContains(t, err, `gpus[0].eccEnabled: model "my-gpu" has no ECC memory`)
}
