package sim

import (
	"os"
	"sync/atomic"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// device is a simulated physical GPU.
type device struct {
	mock.Device

	srv    *Server
	gpu    *GPU // immutable
	addr   pciAddress
	uuid   string
	serial string
	// lost: the GPU fell off the bus (see lost.go).
	lost atomic.Bool
	// resetRequired: a lost GPU answers ERROR_RESET_REQUIRED instead.
	resetRequired atomic.Bool
	// unbound: handle lookups of the GPU answer ERROR_NOT_FOUND.
	unbound atomic.Bool

	// Guarded by srv.mu.
	migMode int
	// migPending is the MIG mode after the next GPU reset; it differs
	// from migMode only on GPUs that need a reset to switch (Ampere, see
	// migcaps.go).
	migPending  int
	computeMode nvml.ComputeMode
	gis         map[uint32]*gpuInstance // by GPU instance ID
	migCounter  uint64                  // seeds MIG device UUIDs; bumped per compute instance
}

var _ nvml.Device = (*device)(nil)

// PCI class of a "3D controller", what data-center GPUs report.
const (
	pciBaseClassDisplay = 0x03
	pciSubClass3D       = 0x02
)

func newDevice(s *Server, g *GPU) *device {
	addr, _ := parsePCIAddress(g.PCIBusID) // validated by Parse
	d := &device{srv: s, gpu: g, addr: addr, gis: map[uint32]*gpuInstance{}}
	d.uuid = s.gpuUUID(g.Index)
	d.serial = serialFor(d.uuid)
	if g.MIGEnabled {
		d.migMode = nvml.DEVICE_MIG_ENABLE
	}
	d.migPending = d.migMode
	d.setFuncs()
	d.setMIGFuncs()
	d.setNVLinkFuncs()
	d.setFabricFuncs()
	// The fault calls are added by installFaults; finishHandle follows it.
	return d
}

func (d *device) model() *Model { return d.gpu.Model }

func (d *device) setFuncs() {
	m := d.model()
	d.GetUUIDFunc = func() (string, nvml.Return) { return d.uuid, nvml.SUCCESS }
	d.GetNameFunc = func() (string, nvml.Return) { return m.ProductName, nvml.SUCCESS }
	d.GetBrandFunc = func() (nvml.BrandType, nvml.Return) { return m.Brand, nvml.SUCCESS }
	d.GetArchitectureFunc = func() (nvml.DeviceArchitecture, nvml.Return) { return m.Architecture, nvml.SUCCESS }
	d.GetCudaComputeCapabilityFunc = func() (int, int, nvml.Return) {
		return m.ComputeCapabilityMajor, m.ComputeCapabilityMinor, nvml.SUCCESS
	}
	d.GetIndexFunc = func() (int, nvml.Return) { return d.gpu.Index, nvml.SUCCESS }
	d.GetMinorNumberFunc = func() (int, nvml.Return) { return d.gpu.Index, nvml.SUCCESS }
	d.GetSerialFunc = func() (string, nvml.Return) { return d.serial, nvml.SUCCESS }
	d.GetModuleIdFunc = d.moduleID
	d.GetBoardPartNumberFunc = func() (string, nvml.Return) {
		if m.BoardPartNumber == "" {
			return "", nvml.ERROR_NOT_SUPPORTED
		}
		return m.BoardPartNumber, nvml.SUCCESS
	}
	// Memory, utilization, power, temperature, clocks: setTelemetryFuncs.
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return d.pciInfo(), nvml.SUCCESS }
	d.GetPciInfoExtFunc = func() (nvml.PciInfoExt, nvml.Return) {
		p := nvml.PciInfoExt{
			Version: nvml.STRUCT_VERSION(nvml.PciInfoExt{}, 1),
			Domain:  d.addr.Domain, Bus: d.addr.Bus, Device: d.addr.Device,
			PciDeviceId: m.PCIDeviceID, PciSubSystemId: m.PCISubsystemID,
			BaseClass: pciBaseClassDisplay, SubClass: pciSubClass3D,
		}
		toCChars(p.BusId[:], d.addr.nvmlBusID())
		return p, nvml.SUCCESS
	}
	// GetNumaNodeId: setCapabilityFuncs (capabilities.go).
	d.GetComputeModeFunc = func() (nvml.ComputeMode, nvml.Return) {
		d.srv.mu.Lock()
		defer d.srv.mu.Unlock()
		return d.computeMode, nvml.SUCCESS
	}
	d.SetComputeModeFunc = func(mode nvml.ComputeMode) nvml.Return {
		if mode < 0 || mode >= nvml.COMPUTEMODE_COUNT {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		// nvml.h: EXCLUSIVE_THREAD is "Support Removed"; what real NVML
		// answers is unverified, the least kind plausible code is taken.
		if mode == nvml.COMPUTEMODE_EXCLUSIVE_THREAD {
			return nvml.ERROR_NOT_SUPPORTED
		}
		// nvml.h: "Requires root/admin permissions".
		if os.Geteuid() != 0 {
			return nvml.ERROR_NO_PERMISSION
		}
		d.srv.mu.Lock()
		defer d.srv.mu.Unlock()
		// nvml.h: "If MIG is enabled on a GPU, device must be MIG device
		// handle": the GPU's own handle cannot set it then (the code real
		// NVML answers is unverified; the least kind plausible one).
		if d.migMode == nvml.DEVICE_MIG_ENABLE {
			return nvml.ERROR_NOT_SUPPORTED
		}
		d.computeMode = mode
		d.srv.persistLocked()
		return nvml.SUCCESS
	}
	d.GetEccModeFunc = func() (nvml.EnableState, nvml.EnableState, nvml.Return) {
		if !m.ECC {
			return 0, 0, nvml.ERROR_NOT_SUPPORTED
		}
		mode := nvml.FEATURE_DISABLED
		if d.gpu.ECCEnabled {
			mode = nvml.FEATURE_ENABLED
		}
		return mode, mode, nvml.SUCCESS
	}
	d.IsMigDeviceHandleFunc = func() (bool, nvml.Return) { return false, nvml.SUCCESS }
	d.GetDeviceHandleFromMigDeviceHandleFunc = func() (nvml.Device, nvml.Return) {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
}

func (d *device) pciInfo() nvml.PciInfo {
	m := d.model()
	p := nvml.PciInfo{
		Domain: d.addr.Domain, Bus: d.addr.Bus, Device: d.addr.Device,
		PciDeviceId: m.PCIDeviceID, PciSubSystemId: m.PCISubsystemID,
	}
	toCChars(p.BusIdLegacy[:], d.addr.nvmlBusIDLegacy())
	toCChars(p.BusId[:], d.addr.nvmlBusID())
	return p
}

// setMIGFuncs sets the MIG calls of the physical GPU. On a GPU that is not
// MIG-capable they are left to fillUnset and answer ERROR_NOT_SUPPORTED.
func (d *device) setMIGFuncs() {
	mig := d.model().MIG
	if mig == nil {
		return
	}
	d.GetMigModeFunc = func() (int, int, nvml.Return) {
		d.srv.mu.Lock()
		defer d.srv.mu.Unlock()
		return d.migMode, d.migPending, nvml.SUCCESS
	}
	d.SetMigModeFunc = d.setMigMode
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return mig.MaxDevices, nvml.SUCCESS }
	d.GetMigDeviceHandleByIndexFunc = func(index int) (nvml.Device, nvml.Return) {
		if index < 0 || index >= mig.MaxDevices {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		d.srv.mu.Lock()
		defer d.srv.mu.Unlock()
		devs := d.migDevicesLocked()
		if index >= len(devs) {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return devs[index], nvml.SUCCESS
	}
	d.GetGpuInstanceProfileInfoFunc = func(profile int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
		if profile < 0 || profile >= nvml.GPU_INSTANCE_PROFILE_COUNT {
			return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_INVALID_ARGUMENT
		}
		p := mig.profileByNVMLIndex(profile)
		if p == nil {
			return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
		return p.info(), nvml.SUCCESS
	}
	d.GetGpuInstancePossiblePlacementsFunc = func(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return) {
		p := d.profileFor(info)
		if p == nil {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		out := make([]nvml.GpuInstancePlacement, len(p.Placements))
		for i, start := range p.Placements {
			out[i] = nvml.GpuInstancePlacement{Start: uint32(start), Size: uint32(p.PlacementSize)}
		}
		return out, nvml.SUCCESS
	}
	d.GetGpuInstanceRemainingCapacityFunc = func(info *nvml.GpuInstanceProfileInfo) (int, nvml.Return) {
		p := d.profileFor(info)
		if p == nil {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		d.srv.mu.Lock()
		defer d.srv.mu.Unlock()
		if d.migMode != nvml.DEVICE_MIG_ENABLE {
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		return remainingCapacity(mig, d.slotsLocked(), p), nvml.SUCCESS
	}
	d.CreateGpuInstanceFunc = func(info *nvml.GpuInstanceProfileInfo) (nvml.GpuInstance, nvml.Return) {
		return d.createGpuInstance(info, nil)
	}
	d.CreateGpuInstanceWithPlacementFunc = func(info *nvml.GpuInstanceProfileInfo, pl *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
		if pl == nil {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		return d.createGpuInstance(info, pl)
	}
	d.GetGpuInstancesFunc = func(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstance, nvml.Return) {
		p := d.profileFor(info)
		if p == nil {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		d.srv.mu.Lock()
		defer d.srv.mu.Unlock()
		if d.migMode != nvml.DEVICE_MIG_ENABLE {
			return nil, nvml.ERROR_NOT_SUPPORTED
		}
		var out []nvml.GpuInstance
		for _, gi := range d.sortedGIsLocked() {
			if gi.prof.ID == p.ID {
				out = append(out, gi)
			}
		}
		return out, nvml.SUCCESS
	}
	d.GetGpuInstanceByIdFunc = func(id int) (nvml.GpuInstance, nvml.Return) {
		d.srv.mu.Lock()
		defer d.srv.mu.Unlock()
		if d.migMode != nvml.DEVICE_MIG_ENABLE {
			return nil, nvml.ERROR_NOT_SUPPORTED
		}
		if gi, ok := d.gis[uint32(id)]; ok && id >= 0 {
			return gi, nvml.SUCCESS
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
}

// profileFor resolves the profile info a caller passes back to NVML.
func (d *device) profileFor(info *nvml.GpuInstanceProfileInfo) *GPUInstanceProfile {
	if info == nil {
		return nil
	}
	return d.model().MIG.profileByID(info.Id)
}
