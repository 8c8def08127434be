package sim

import (
	"reflect"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// A GPU that fell off the bus (XID 79, or SetLost) answers nothing, as real
// NVML can behave: every call on its handle, on its GPU and compute
// instances and on its MIG devices, and every handle lookup of it
// (DeviceGetHandleByIndex, ByUUID, ByPciBusId, BySerial, also of its MIG
// devices) answers ERROR_GPU_IS_LOST, identity queries (UUID, name, PCI
// info) included. DeviceGetCount still counts it. Reset or SetLost(false)
// bring it back: the handles obtained before answer again. A GPU that needs
// a reset (SetResetRequired) answers ERROR_RESET_REQUIRED the same way; an
// unbound one (SetUnbound) is not found by lookups.

// lostReturn is what every call of a lost GPU answers (SUCCESS while it is
// not lost): ERROR_GPU_IS_LOST, or ERROR_RESET_REQUIRED for a GPU that
// needs a reset (SetResetRequired).
func (d *device) lostReturn() nvml.Return {
	if !d.lost.Load() {
		return nvml.SUCCESS
	}
	if d.resetRequired.Load() {
		return nvml.ERROR_RESET_REQUIRED
	}
	return nvml.ERROR_GPU_IS_LOST
}

// finishHandle makes every call of a GPU's handle object (the device
// itself, a GPU or compute instance, a MIG device) fail with
// ERROR_GPU_IS_LOST while the GPU is lost: the modelled calls are wrapped,
// the rest get lost-aware defaults. Call it once all modelled XxxFunc
// fields are set.
func finishHandle(mockPtr any, d *device) {
	guardLost(mockPtr, d.lostReturn)
	fillUnsetOf(mockPtr, false, d.lostReturn)
}

// guardLost wraps every set XxxFunc field of the moq struct behind mockPtr:
// while lost() answers other than SUCCESS the call answers zero values and
// that code in each nvml.Return result, without calling the model.
func guardLost(mockPtr any, lost func() nvml.Return) {
	v := reflect.ValueOf(mockPtr).Elem()
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		fv := v.Field(i)
		if !f.IsExported() || f.Type.Kind() != reflect.Func || fv.IsNil() || !strings.HasSuffix(f.Name, "Func") {
			continue
		}
		inner := reflect.ValueOf(fv.Interface())
		ft := f.Type
		fv.Set(reflect.MakeFunc(ft, func(args []reflect.Value) []reflect.Value {
			if ret := lost(); ret != nvml.SUCCESS {
				return results(ft, ret)
			}
			if ft.IsVariadic() {
				return inner.CallSlice(args)
			}
			return inner.Call(args)
		}))
	}
}

// lookup returns a handle of d, or what a lost GPU answers while d is lost,
// or ERROR_NOT_FOUND while it is unbound (SetUnbound).
func lookup[T nvml.Device](d *device, h T) (nvml.Device, nvml.Return) {
	if d.unbound.Load() {
		return nil, nvml.ERROR_NOT_FOUND
	}
	if ret := d.lostReturn(); ret != nvml.SUCCESS {
		return nil, ret
	}
	return h, nvml.SUCCESS
}

// SetResetRequired makes the GPU answer every call, and every lookup of
// its handle, with ERROR_RESET_REQUIRED (or answer again), without an
// event, as NVML does for a GPU that must be reset before it can be used.
func (s *Server) SetResetRequired(gpuUUID string, on bool) error {
	d, err := s.gpuByUUID(gpuUUID)
	if err != nil {
		return err
	}
	d.resetRequired.Store(on)
	d.lost.Store(on)
	return nil
}

// SetUnbound makes the GPU vanish from handle lookups (ERROR_NOT_FOUND, as
// for a GPU unbound from the driver) while the handles obtained before
// answer ERROR_GPU_IS_LOST; or brings it back.
func (s *Server) SetUnbound(gpuUUID string, on bool) error {
	d, err := s.gpuByUUID(gpuUUID)
	if err != nil {
		return err
	}
	d.unbound.Store(on)
	d.lost.Store(on)
	return nil
}
