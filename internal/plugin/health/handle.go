package health

import (
	"context"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"
)

// Values of the lost condition besides gpu-is-lost and reset-required.
const (
	// lostUnreachable: NVML gave no handle of the GPU, for another reason.
	lostUnreachable = "unreachable"
	// lostReplaced: another GPU answers where the GPU was.
	lostReplaced = "replaced"
)

// lostValue names an NVML error in a lost condition.
func lostValue(ret nvml.Return) string {
	switch ret {
	case nvml.ERROR_GPU_IS_LOST:
		return "gpu-is-lost"
	case nvml.ERROR_RESET_REQUIRED:
		return "reset-required"
	}
	return lostUnreachable
}

// device returns the GPU's handle. A GPU that had none at start is looked
// up again, by PCI bus ID (else UUID); while NVML gives none, or another
// GPU answers there, the GPU stays lost and device returns nil. Once found,
// the handle is kept.
func (m *Monitor) device(ctx context.Context, gpu GPU) nvml.Device {
	if gpu.Device != nil {
		return gpu.Device
	}
	m.mu.Lock()
	dev := m.found[gpu.UUID]
	m.mu.Unlock()
	if dev != nil {
		return dev
	}
	var ret nvml.Return
	call := "DeviceGetHandleByUUID"
	if gpu.PCIBusID != "" {
		call = "DeviceGetHandleByPciBusId"
	}
	ret = m.timed(call, func() nvml.Return {
		var r nvml.Return
		if gpu.PCIBusID != "" {
			dev, r = m.cfg.Lib.DeviceGetHandleByPciBusId(gpu.PCIBusID)
		} else {
			dev, r = m.cfg.Lib.DeviceGetHandleByUUID(gpu.UUID)
		}
		return r
	})
	if ret != nvml.SUCCESS {
		m.setLost(ctx, gpu.UUID, lostValue(ret))
		return nil
	}
	var uuid string
	ret = m.timed("GetUUID", func() nvml.Return {
		var r nvml.Return
		uuid, r = dev.GetUUID()
		return r
	})
	switch {
	case ret != nvml.SUCCESS:
		m.setLost(ctx, gpu.UUID, lostValue(ret))
		return nil
	case uuid != gpu.UUID:
		c := lostCondition(lostReplaced, m.cfg.now())
		c.Message = "another GPU (" + uuid + ") answers at PCI bus ID " + gpu.PCIBusID + "; restart the plugin to publish it"
		m.update(ctx, gpu.UUID, func(g *gpuState) bool { return g.set(c) })
		return nil
	}
	klog.FromContext(ctx).Info("GPU answers NVML again", "gpu", gpu.Name, "uuid", gpu.UUID)
	m.mu.Lock()
	m.found[gpu.UUID] = dev
	m.mu.Unlock()
	return dev
}
