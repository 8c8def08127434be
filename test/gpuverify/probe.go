package gpuverify

import (
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/internal/plugin/health"
)

// Probe is what the kit read from one GPU: the questions the health
// monitor's probe asks (does it answer, which recovery action does the
// driver want, uncorrectable ECC errors), plus memory and temperature for
// the reader. Only reads.
type Probe struct {
	GPU string `json:"gpu"`
	// Answers is NVML's return for GetMemoryInfo ("SUCCESS" when it answers).
	Answers          string `json:"answers"`
	MemoryUsedBytes  uint64 `json:"memoryUsedBytes"`
	MemoryTotalBytes uint64 `json:"memoryTotalBytes"`
	// TemperatureC is nil when NVML does not report it.
	TemperatureC *uint32 `json:"temperatureC,omitempty"`
	// RecoveryAction is empty when the driver does not report it (before R550).
	RecoveryAction string `json:"recoveryAction,omitempty"`
	// UncorrectedECC is the volatile uncorrectable ECC count; nil when the
	// GPU has no ECC (or it is off).
	UncorrectedECC *uint64 `json:"uncorrectedECC,omitempty"`
}

// probeAll probes every GPU and records a check per GPU: it answers and
// the driver asks for no recovery action.
func probeAll(s *Section, gpus []health.GPU, when string) []Probe {
	out := make([]Probe, 0, len(gpus))
	for _, g := range gpus {
		p := probe(g)
		out = append(out, p)
		switch {
		case p.Answers != nvml.SUCCESS.String():
			s.fail("probe %s: %s does not answer NVML: %s", when, g.Name, p.Answers)
		case p.RecoveryAction != "" && p.RecoveryAction != "none":
			s.fail("probe %s: %s: the driver asks for recovery action %s", when, g.Name, p.RecoveryAction)
		default:
			s.pass("probe %s: %s answers; %s", when, g.Name, p.describe())
		}
	}
	return out
}

func probe(g health.GPU) Probe {
	p := Probe{GPU: g.Name}
	mem, ret := g.Device.GetMemoryInfo()
	p.Answers = ret.String()
	if ret != nvml.SUCCESS {
		return p
	}
	p.MemoryUsedBytes, p.MemoryTotalBytes = mem.Used, mem.Total
	if t, ret := g.Device.GetTemperature(nvml.TEMPERATURE_GPU); ret == nvml.SUCCESS {
		p.TemperatureC = &t
	}
	values := []nvml.FieldValue{{FieldId: nvml.FI_DEV_GET_GPU_RECOVERY_ACTION}}
	if ret := g.Device.GetFieldValues(values); ret == nvml.SUCCESS && nvml.Return(values[0].NvmlReturn) == nvml.SUCCESS {
		if v, ok := health.FieldUint(values[0]); ok {
			// The name the plugin's recovery taint would carry.
			p.RecoveryAction = health.RecoveryActionName(nvml.DeviceGpuRecoveryAction(v))
		}
	}
	if ecc, ret := g.Device.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC); ret == nvml.SUCCESS {
		p.UncorrectedECC = &ecc
	}
	return p
}

func (p Probe) describe() string {
	parts := []string{fmt.Sprintf("%s of %s used", gib(p.MemoryUsedBytes), gib(p.MemoryTotalBytes))}
	if p.TemperatureC != nil {
		parts = append(parts, fmt.Sprintf("%d °C", *p.TemperatureC))
	}
	if p.RecoveryAction != "" {
		parts = append(parts, "recovery action "+p.RecoveryAction)
	} else {
		parts = append(parts, "recovery action not reported by this driver")
	}
	if p.UncorrectedECC != nil {
		parts = append(parts, fmt.Sprintf("uncorrectable ECC errors (volatile) %d", *p.UncorrectedECC))
	} else {
		parts = append(parts, "no ECC counters")
	}
	return strings.Join(parts, ", ")
}

// compareECC fails a GPU whose uncorrectable ECC count went up during the watch.
func compareECC(s *Section, before, after []Probe) {
	for i := range min(len(before), len(after)) {
		b, a := before[i].UncorrectedECC, after[i].UncorrectedECC
		if b != nil && a != nil && *a > *b {
			s.fail("%s: %d uncorrectable ECC error(s) during the watch", after[i].GPU, *a-*b)
		}
	}
}
