package sim

import (
	"fmt"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const testClusterUUID = "6f3b2a91-4c1e-4f7a-9d2b-8e5c0a1d7b44"

// fabricServer is a one-GPU node of model with the given driver and the
// GPU entry's extra settings (such as a fabric entry).
func fabricServer(t *testing.T, driver, model, entry string) *Server {
	t.Helper()
	p, err := Parse([]byte(fmt.Sprintf("name: fabric\ndriverVersion: %q\ncudaDriverVersion: \"12.8\"\ngpus:\n  - {model: %s%s}\n",
		driver, model, entry)))
	require.NoError(t, err)
	s := NewServer(p, "n")
	require.Equal(t, nvml.SUCCESS, s.Init())
	t.Cleanup(func() { _ = s.Shutdown() })
	return s
}

func firstGPU(t *testing.T, s *Server) *device {
	t.Helper()
	d, ret := s.DeviceGetHandleByIndex(0)
	require.Equal(t, nvml.SUCCESS, ret)
	return d.(*device)
}

// healthField reads one field of NVML's fabric health mask.
func healthField(mask, shift uint32) uint32 { return mask >> shift & 0x3 }

// TestFabricInfo: what nvmlDeviceGetGpuFabricInfo and ...InfoV answer per
// model, driver and fabric entry. Only a gpuFabric model answers; until the
// registration completed it reports no cluster and no clique.
func TestFabricInfo(t *testing.T) {
	cluster := uuid.MustParse(testClusterUUID)
	completed := fmt.Sprintf(", fabric: {clusterUUID: %s, cliqueID: 7}", testClusterUUID)
	tests := []struct {
		name, driver, model, entry string
		v1, v2, v3                 nvml.Return
		state                      nvml.GpuFabricState
		status                     nvml.Return
		cluster                    uuid.UUID
		clique                     uint32
		degraded                   bool
		summary                    uint8
	}{
		{name: "A100: no fabric", driver: "550.90.07", model: "a100-sxm4-40gb",
			v1: nvml.ERROR_NOT_SUPPORTED, v2: nvml.ERROR_NOT_SUPPORTED, v3: nvml.ERROR_ARGUMENT_VERSION_MISMATCH},
		{name: "L4: no fabric", driver: "580.82.07", model: "l4",
			v1: nvml.ERROR_NOT_SUPPORTED, v2: nvml.ERROR_NOT_SUPPORTED, v3: nvml.ERROR_NOT_SUPPORTED},
		{name: "H100 SXM (x86 board): no fabric", driver: "570.124.06", model: "h100-sxm5-80gb",
			v1: nvml.ERROR_NOT_SUPPORTED, v2: nvml.ERROR_NOT_SUPPORTED, v3: nvml.ERROR_ARGUMENT_VERSION_MISMATCH},
		{name: "A100 on R535: the versioned call does not exist", driver: "535.183.01", model: "a100-sxm4-40gb",
			v1: nvml.ERROR_NOT_SUPPORTED, v2: nvml.ERROR_FUNCTION_NOT_FOUND, v3: nvml.ERROR_FUNCTION_NOT_FOUND},
		{name: "GB200 without an entry: not registered", driver: "580.82.07", model: "gb200",
			v1: nvml.SUCCESS, v2: nvml.SUCCESS, v3: nvml.SUCCESS, state: nvml.GPU_FABRIC_STATE_NOT_STARTED,
			summary: nvml.GPU_FABRIC_HEALTH_SUMMARY_HEALTHY},
		{name: "GB200 completed", driver: "580.82.07", model: "gb200", entry: completed,
			v1: nvml.SUCCESS, v2: nvml.SUCCESS, v3: nvml.SUCCESS, state: nvml.GPU_FABRIC_STATE_COMPLETED,
			cluster: cluster, clique: 7, summary: nvml.GPU_FABRIC_HEALTH_SUMMARY_HEALTHY},
		{name: "GB200 in progress: nothing assigned yet", driver: "580.82.07", model: "gb200",
			entry: fmt.Sprintf(", fabric: {clusterUUID: %s, cliqueID: 7, state: in-progress}", testClusterUUID),
			v1:    nvml.SUCCESS, v2: nvml.SUCCESS, v3: nvml.SUCCESS, state: nvml.GPU_FABRIC_STATE_IN_PROGRESS,
			summary: nvml.GPU_FABRIC_HEALTH_SUMMARY_HEALTHY},
		{name: "GB200 completed with an error", driver: "580.82.07", model: "gb200",
			entry: fmt.Sprintf(", fabric: {clusterUUID: %s, cliqueID: 7, status: TIMEOUT}", testClusterUUID),
			v1:    nvml.SUCCESS, v2: nvml.SUCCESS, v3: nvml.SUCCESS, state: nvml.GPU_FABRIC_STATE_COMPLETED,
			status: nvml.ERROR_TIMEOUT, cluster: cluster, clique: 7, summary: nvml.GPU_FABRIC_HEALTH_SUMMARY_HEALTHY},
		{name: "GB200 with degraded bandwidth", driver: "580.82.07", model: "gb200",
			entry: fmt.Sprintf(", fabric: {clusterUUID: %s, cliqueID: 7, health: [degraded-bandwidth]}", testClusterUUID),
			v1:    nvml.SUCCESS, v2: nvml.SUCCESS, v3: nvml.SUCCESS, state: nvml.GPU_FABRIC_STATE_COMPLETED,
			cluster: cluster, clique: 7, degraded: true, summary: nvml.GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY},
		{name: "GB200 on R570: no v3 struct", driver: "570.133.20", model: "gb200", entry: completed,
			v1: nvml.SUCCESS, v2: nvml.SUCCESS, v3: nvml.ERROR_ARGUMENT_VERSION_MISMATCH, state: nvml.GPU_FABRIC_STATE_COMPLETED,
			cluster: cluster, clique: 7},
		{name: "GB200 on R535: only the unversioned call", driver: "535.183.01", model: "gb200", entry: completed,
			v1: nvml.SUCCESS, v2: nvml.ERROR_FUNCTION_NOT_FOUND, v3: nvml.ERROR_FUNCTION_NOT_FOUND,
			state: nvml.GPU_FABRIC_STATE_COMPLETED, cluster: cluster, clique: 7},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := fabricServer(t, tc.driver, tc.model, tc.entry)
			d := firstGPU(t, s)

			v1, ret := s.DeviceGetGpuFabricInfo(d)
			require.Equal(t, tc.v1, ret, "nvmlDeviceGetGpuFabricInfo")
			v2, ret := d.GpuFabricInfoV(FabricInfoV2)
			require.Equal(t, tc.v2, ret, "nvmlDeviceGetGpuFabricInfoV, v2")
			v3, ret3 := d.GpuFabricInfoV(FabricInfoV3)
			require.Equal(t, tc.v3, ret3, "nvmlDeviceGetGpuFabricInfoV, v3")
			require.Equal(t, tc.v2 != nvml.ERROR_FUNCTION_NOT_FOUND, s.Extensions().LookupSymbol("nvmlDeviceGetGpuFabricInfoV") == nil,
				"the symbol exists where the call does")
			if tc.v1 != nvml.SUCCESS {
				return
			}
			assert.Equal(t, uint8(tc.state), v1.State)
			assert.Equal(t, uint32(tc.status), v1.Status)
			assert.Equal(t, [16]uint8(tc.cluster), v1.ClusterUuid)
			assert.Equal(t, tc.clique, v1.CliqueId)
			if tc.v2 == nvml.SUCCESS {
				assert.Equal(t, FabricInfoV2, v2.Version)
				assert.Equal(t, v1.State, v2.State)
				assert.Equal(t, v1.ClusterUuid, v2.ClusterUuid)
				assert.Equal(t, v1.CliqueId, v2.CliqueId)
				assert.Zero(t, v2.HealthSummary, "a v2 struct has no summary")
				want := uint32(nvml.GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_FALSE)
				if tc.degraded {
					want = nvml.GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE
				}
				assert.Equal(t, want, healthField(v2.HealthMask, nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW))
				assert.Equal(t, uint32(nvml.GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_FALSE),
					healthField(v2.HealthMask, nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY))
				assert.Zero(t, healthField(v2.HealthMask, nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_PARTITION_ASSIGNED), "not modelled: NOT_SUPPORTED")
			}
			if ret3 == nvml.SUCCESS {
				assert.Equal(t, FabricInfoV3, v3.Version)
				assert.Equal(t, tc.summary, v3.HealthSummary)
			}
		})
	}
}

func TestFabricInfoVersionAndLostGPU(t *testing.T) {
	s := fabricServer(t, "580.82.07", "gb200", fmt.Sprintf(", fabric: {clusterUUID: %s, cliqueID: 1}", testClusterUUID))
	d := firstGPU(t, s)
	_, ret := d.GpuFabricInfoV(nvml.STRUCT_VERSION(nvml.GpuFabricInfo_v2{}, 1))
	require.Equal(t, nvml.ERROR_ARGUMENT_VERSION_MISMATCH, ret)

	require.NoError(t, s.SetLost(d.uuid, true))
	_, ret = d.GetGpuFabricInfo()
	require.Equal(t, nvml.ERROR_GPU_IS_LOST, ret)
	_, ret = d.GpuFabricInfoV(FabricInfoV2)
	require.Equal(t, nvml.ERROR_GPU_IS_LOST, ret)
	require.NoError(t, s.SetLost(d.uuid, false))
	info, ret := d.GpuFabricInfoV(FabricInfoV2)
	require.Equal(t, nvml.SUCCESS, ret)
	require.Equal(t, uint32(1), info.CliqueId)
}

// TestFabricHealthMask: every listed condition reads TRUE, the others of
// the modelled fields FALSE; route-unhealthy makes the summary unhealthy.
func TestFabricHealthMask(t *testing.T) {
	s := fabricServer(t, "580.82.07", "gb200",
		", fabric: {health: [route-unhealthy, access-timeout-recovery, route-unhealthy]}")
	info, ret := firstGPU(t, s).GpuFabricInfoV(FabricInfoV3)
	require.Equal(t, nvml.SUCCESS, ret)
	for name, shift := range fabricHealthFields {
		want := uint32(2)
		if name == "route-unhealthy" || name == "access-timeout-recovery" {
			want = 1
		}
		assert.Equal(t, want, healthField(info.HealthMask, shift), name)
	}
	assert.Equal(t, uint8(nvml.GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY), info.HealthSummary)
	assert.Equal(t, []string{"access-timeout-recovery", "route-unhealthy"}, s.Profile().GPUs[0].Fabric.Health)
}

// TestFabricEntryMerge: a device's entry overrides the group's field by
// field; the built-in GB200 tray is registered in one clique.
func TestFabricEntryMerge(t *testing.T) {
	p, err := Parse([]byte(`name: rack
driverVersion: "580.82.07"
cudaDriverVersion: "13.0"
gpus:
  - model: gb200
    count: 3
    fabric: {clusterUUID: ` + testClusterUUID + `, cliqueID: 4, health: [degraded-bandwidth]}
    devices:
      - {fabric: {state: in-progress}}
      - {fabric: {cliqueID: 5, health: []}}
`))
	require.NoError(t, err)
	f := func(i int) Fabric { return *p.GPUs[i].Fabric }
	assert.Equal(t, nvml.GpuFabricState(nvml.GPU_FABRIC_STATE_IN_PROGRESS), f(0).State)
	assert.Equal(t, uint32(4), f(0).CliqueID)
	assert.Equal(t, uint32(5), f(1).CliqueID)
	assert.Empty(t, f(1).Health)
	assert.Equal(t, []string{"degraded-bandwidth"}, f(2).Health)
	assert.Equal(t, nvml.GpuFabricState(nvml.GPU_FABRIC_STATE_COMPLETED), f(2).State)

	tray, err := Load("gb200-nvl72-tray", nil)
	require.NoError(t, err)
	require.Len(t, tray.GPUs, 4)
	for _, g := range tray.GPUs {
		require.Equal(t, uuid.MustParse(testClusterUUID), g.Fabric.ClusterUUID)
		require.Equal(t, uint32(1), g.Fabric.CliqueID)
		require.Equal(t, nvml.GpuFabricState(nvml.GPU_FABRIC_STATE_COMPLETED), g.Fabric.State)
	}
}

func TestFabricEntryErrors(t *testing.T) {
	tests := []struct{ name, doc, want string }{
		{"fabric on a GPU without it", "gpus: [{model: l4, fabric: {cliqueID: 1}}]",
			`gpus[0].fabric: model "l4" has no NVLink fabric information`},
		{"unknown state", "gpus: [{model: gb200, fabric: {state: done}}]",
			`gpus[0].fabric.state: "done" is not one of completed, in-progress, not-started, not-supported`},
		{"bad cluster UUID", "gpus: [{model: gb200, devices: [{fabric: {clusterUUID: rack-1}}]}]",
			`gpus[0].devices[0].fabric.clusterUUID: "rack-1" is not a UUID`},
		{"negative clique", "gpus: [{model: gb200, fabric: {cliqueID: -1}}]", "gpus[0].fabric.cliqueID: -1 is not an unsigned 32-bit clique ID"},
		{"unknown status", "gpus: [{model: gb200, fabric: {status: BROKEN}}]", `gpus[0].fabric.status: "BROKEN" is not one of`},
		{"unknown health", "gpus: [{model: gb200, fabric: {health: [slow]}}]", `gpus[0].fabric.health[0]: "slow" is not one of`},
		{"unknown field", "gpus: [{model: gb200, fabric: {clique: 1}}]", "gpus[0].fabric.clique: unknown field"},
		{"gpuFabric before Hopper", `models:
  - {name: old, productName: Old, architecture: Ampere, computeCapability: "8.0", memory: 40Gi, pciDeviceID: "0x20B010DE", nvml: {gpuFabric: true}}
gpus: [{model: old}]`, "models[0].nvml.gpuFabric: only for Hopper or newer GPUs"},
		{"unknown addressing mode", `models:
  - {name: m, productName: M, architecture: Hopper, computeCapability: "9.0", memory: 80Gi, pciDeviceID: "0x233010DE", nvml: {addressingMode: svm}}
gpus: [{model: m}]`, `models[0].nvml.addressingMode: "svm" is not one of not-supported, none, hmm, ats`},
		{"addressing mode before Turing", `models:
  - {name: v, productName: V, architecture: Volta, computeCapability: "7.0", memory: 32Gi, pciDeviceID: "0x1DB610DE", nvml: {addressingMode: hmm}}
gpus: [{model: v}]`, "models[0].nvml.addressingMode: hmm only for Turing or newer GPUs"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte("name: bad\ndriverVersion: \"580.82.07\"\ncudaDriverVersion: \"13.0\"\n" + tc.doc + "\n"))
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// TestAddressingModeSymbol: the in-process server reports the addressing
// mode's call missing under a driver older than the simulator gives it.
func TestAddressingModeSymbol(t *testing.T) {
	for profile, has := range map[string]bool{"gb200-nvl72-tray": true, "hgx-b200": true, "dgx-h100": false, "gh200": false} {
		p, err := Load(profile, nil)
		require.NoError(t, err)
		srv := NewServer(p, "n")
		require.Equal(t, nvml.SUCCESS, srv.Init())
		assert.Equal(t, has, srv.Extensions().LookupSymbol(AddressingModeSymbol) == nil, profile)
		_ = srv.Shutdown()
	}
}
