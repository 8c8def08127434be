package sim

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// migDevice is the device handle of one compute instance, as returned by
// GetMigDeviceHandleByIndex. Its handle becomes invalid (calls answer
// ERROR_INVALID_ARGUMENT) once the compute instance is destroyed.
type migDevice struct {
	mock.Device

	ci   *computeInstance
	uuid string
}

var _ nvml.Device = (*migDevice)(nil)

// profileName is the MIG device profile, "3g.40gb", or "1c.3g.40gb" when
// the compute instance is smaller than its GPU instance.
func (ci *computeInstance) profileName() string {
	if ci.prof.slices == ci.gi.prof.Slices {
		return ci.gi.prof.Name
	}
	return fmt.Sprintf("%dc.%s", ci.prof.slices, ci.gi.prof.Name)
}

func newMIGDevice(ci *computeInstance, id string) *migDevice {
	m := &migDevice{ci: ci, uuid: id}
	parent := ci.gi.dev
	model := parent.model()
	gi := ci.gi.prof
	memory := gi.MemoryMiB * mib
	name := model.ProductName + " MIG " + ci.profileName()

	m.GetUUIDFunc = func() (string, nvml.Return) { return guard(m, m.uuid) }
	m.GetNameFunc = func() (string, nvml.Return) { return guard(m, name) }
	m.IsMigDeviceHandleFunc = func() (bool, nvml.Return) { return guard(m, true) }
	m.GetDeviceHandleFromMigDeviceHandleFunc = func() (nvml.Device, nvml.Return) {
		return guard[nvml.Device](m, parent)
	}
	// Like NVML, a MIG device's index is the one GetMigDeviceHandleByIndex
	// takes (nvcdi names MIG devices "<GPU index>:<MIG index>").
	m.GetIndexFunc = func() (int, nvml.Return) {
		mu := &parent.srv.mu
		mu.Lock()
		defer mu.Unlock()
		for i, other := range parent.migDevicesLocked() {
			if other == m {
				return i, nvml.SUCCESS
			}
		}
		return 0, nvml.ERROR_INVALID_ARGUMENT // destroyed
	}
	m.GetGpuInstanceIdFunc = func() (int, nvml.Return) { return guard(m, int(ci.gi.info.Id)) }
	m.GetComputeInstanceIdFunc = func() (int, nvml.Return) { return guard(m, int(ci.info.Id)) }
	// Memory in use: see telemetry.go.
	m.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		_, used := m.migLoad(parent.srv.clock())
		return guard(m, nvml.Memory{Total: memory, Used: used, Free: memory - used})
	}
	m.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
		_, used := m.migLoad(parent.srv.clock())
		return guard(m, nvml.Memory_v2{Version: nvml.STRUCT_VERSION(nvml.Memory_v2{}, 2), Total: memory, Used: used, Free: memory - used})
	}
	m.GetAttributesFunc = func() (nvml.DeviceAttributes, nvml.Return) {
		return guard(m, nvml.DeviceAttributes{
			MultiprocessorCount:       uint32(ci.prof.multiprocessors),
			SharedCopyEngineCount:     uint32(gi.CopyEngines),
			SharedDecoderCount:        uint32(gi.Decoders),
			SharedEncoderCount:        uint32(gi.Encoders),
			SharedJpegCount:           uint32(gi.JPEGs),
			SharedOfaCount:            uint32(gi.OFAs),
			GpuInstanceSliceCount:     uint32(gi.Slices),
			ComputeInstanceSliceCount: uint32(ci.prof.slices),
			MemorySizeMB:              gi.MemoryMiB,
		})
	}
	// Facts of the physical GPU that NVML also reports for its MIG devices.
	m.GetBrandFunc = func() (nvml.BrandType, nvml.Return) { return guard(m, model.Brand) }
	m.GetArchitectureFunc = func() (nvml.DeviceArchitecture, nvml.Return) { return guard(m, model.Architecture) }
	m.GetCudaComputeCapabilityFunc = func() (int, int, nvml.Return) {
		if !m.alive() {
			return 0, 0, nvml.ERROR_INVALID_ARGUMENT
		}
		return model.ComputeCapabilityMajor, model.ComputeCapabilityMinor, nvml.SUCCESS
	}
	m.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return guard(m, parent.pciInfo()) }
	m.GetNumaNodeIdFunc = func() (int, nvml.Return) {
		if !m.alive() {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		return parent.GetNumaNodeId()
	}
	finishHandle(&m.Device, parent)
	return m
}

// alive reports whether the compute instance behind m still exists.
func (m *migDevice) alive() bool {
	mu := &m.ci.gi.dev.srv.mu
	mu.Lock()
	defer mu.Unlock()
	return !m.ci.destroyed
}

// guard returns v, or ERROR_INVALID_ARGUMENT once the MIG device is gone.
func guard[T any](m *migDevice, v T) (T, nvml.Return) {
	if !m.alive() {
		var zero T
		return zero, nvml.ERROR_INVALID_ARGUMENT
	}
	return v, nvml.SUCCESS
}
