package libtest

import (
	"debug/elf"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/test/nvmlsim/internal/nvmlnames"
)

// exported returns the NVML functions the library defines: strong (a Go
// //export, simulated) and weak (a generated NOT_SUPPORTED fallback).
func exported(t *testing.T) (strong, weak []string) {
	t.Helper()
	f, err := elf.Open(libPath)
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	syms, err := f.DynamicSymbols()
	require.NoError(t, err)
	for _, s := range syms {
		if s.Section == elf.SHN_UNDEF || elf.ST_TYPE(s.Info) != elf.STT_FUNC || !strings.HasPrefix(s.Name, "nvml") {
			continue
		}
		switch elf.ST_BIND(s.Info) {
		case elf.STB_GLOBAL:
			strong = append(strong, s.Name)
		case elf.STB_WEAK:
			weak = append(weak, s.Name)
		}
	}
	slices.Sort(strong)
	slices.Sort(weak)
	return strong, weak
}

// goNVMLNames lists the NVML functions go-nvml calls (its cgo bindings).
func goNVMLNames(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/NVIDIA/go-nvml").Output()
	require.NoError(t, err)
	names, err := nvmlnames.FromFile(filepath.Join(strings.TrimSpace(string(out)), "pkg", "nvml", "nvml.go"))
	require.NoError(t, err)
	return names
}

// TestEveryGoNVMLSymbolExists: a process dies at a call to an NVML
// function its libnvidia-ml lacks, so the library must define every one
// go-nvml binds (stubs_generated.c is up to date), and every simulated
// function must be one of them (no typo in an //export name).
func TestEveryGoNVMLSymbolExists(t *testing.T) {
	strong, weak := exported(t)
	all := append(slices.Clone(strong), weak...)
	want := goNVMLNames(t)
	for _, n := range want {
		require.Contains(t, all, n, "missing: run go generate ./test/nvmlsim/lib")
	}
	for _, n := range strong {
		require.Contains(t, want, n, "an exported name go-nvml does not know")
	}
	require.Contains(t, strong, "nvmlErrorString")
	for _, n := range []string{
		"nvmlInit_v2", "nvmlInit", "nvmlInitWithFlags", "nvmlShutdown",
		"nvmlSystemGetDriverVersion", "nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetNVMLVersion",
		"nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByUUID", "nvmlDeviceGetHandleByPciBusId_v2",
		"nvmlDeviceGetUUID", "nvmlDeviceGetName", "nvmlDeviceGetBrand", "nvmlDeviceGetArchitecture", "nvmlDeviceGetMinorNumber",
		"nvmlDeviceGetCudaComputeCapability", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo_v2",
		"nvmlDeviceGetPciInfo", "nvmlDeviceGetPciInfo_v2", "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetNumaNodeId",
		"nvmlDeviceGetP2PStatus", "nvmlDeviceGetEccMode", "nvmlDeviceGetMigMode", "nvmlDeviceSetMigMode", "nvmlDeviceGetMaxMigDeviceCount",
		"nvmlDeviceGetMigDeviceHandleByIndex", "nvmlDeviceIsMigDeviceHandle", "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
		"nvmlDeviceGetGpuInstanceId", "nvmlDeviceGetComputeInstanceId", "nvmlDeviceGetGpuInstanceProfileInfo",
		"nvmlDeviceGetGpuInstanceProfileInfoV", "nvmlDeviceGetGpuInstancePossiblePlacements_v2",
		"nvmlDeviceCreateGpuInstanceWithPlacement", "nvmlDeviceGetGpuInstances", "nvmlDeviceGetGpuInstanceById",
		"nvmlGpuInstanceGetInfo", "nvmlGpuInstanceDestroy", "nvmlGpuInstanceGetComputeInstanceProfileInfo",
		"nvmlGpuInstanceCreateComputeInstance", "nvmlGpuInstanceGetComputeInstances", "nvmlComputeInstanceGetInfo_v2",
		"nvmlComputeInstanceDestroy", "nvmlEventSetCreate", "nvmlEventSetFree", "nvmlEventSetWait_v2",
		"nvmlDeviceRegisterEvents", "nvmlDeviceGetSupportedEventTypes", "nvmlDeviceGetTotalEccErrors",
		"nvmlDeviceGetFieldValues", "nvmlDeviceGetComputeMode", "nvmlDeviceGetGpuFabricInfo", "nvmlDeviceGetGpuFabricInfoV", "nvmlDeviceGetAddressingMode",
		"nvmlDeviceGetModuleId",
		"nvmlDeviceGetUtilizationRates", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetEnforcedPowerLimit",
		"nvmlDeviceGetTemperature", "nvmlDeviceGetClockInfo", "nvmlDeviceGetMaxClockInfo",
		"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons",
		"nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc", "nvmlGpmSampleFree", "nvmlGpmSampleGet",
		"nvmlGpmMigSampleGet", "nvmlGpmMetricsGet",
	} {
		require.Contains(t, strong, n, "simulated")
	}
	t.Logf("%d simulated NVML functions, %d answering NOT_SUPPORTED", len(strong), len(weak))
	t.Logf("simulated: %s", strings.Join(strong, " "))
}
