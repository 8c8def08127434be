package sim

import (
	"reflect"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// The go-nvml mocks are moq structs: each method calls an XxxFunc field and
// panics when that field is nil. The simulator sets the fields it models and
// then fills every remaining nil field with a default, so that no call on a
// simulated handle can panic:
//
//   - Interface methods of the form DeviceXxx(Device, args...),
//     GpuInstanceXxx(GpuInstance, args...) and
//     ComputeInstanceXxx(ComputeInstance, args...) forward to the handle's
//     Xxx(args...) method, as the real library does;
//   - everything else returns zero values and nvml.ERROR_NOT_SUPPORTED in
//     each nvml.Return result.

var (
	returnType          = reflect.TypeFor[nvml.Return]()
	deviceType          = reflect.TypeFor[nvml.Device]()
	gpuInstanceType     = reflect.TypeFor[nvml.GpuInstance]()
	computeInstanceType = reflect.TypeFor[nvml.ComputeInstance]()
)

// handleTypes maps the prefix of a forwarding Interface method to the handle
// type of its first argument.
var handleTypes = []struct {
	prefix string
	typ    reflect.Type
}{
	// Longest prefixes first: "ComputeInstance..." must not match "Device".
	{"ComputeInstance", computeInstanceType},
	{"GpuInstance", gpuInstanceType},
	{"Device", deviceType},
}

// fillUnset sets every nil XxxFunc field of the moq struct behind mockPtr.
// With forward set, Interface methods on handles are forwarded (see above).
func fillUnset(mockPtr any, forward bool) { fillUnsetOf(mockPtr, forward, nil) }

// fillUnsetOf is fillUnset for a handle of a physical GPU: while lost()
// reports true, the defaults answer ERROR_GPU_IS_LOST instead.
func fillUnsetOf(mockPtr any, forward bool, lost func() nvml.Return) {
	v := reflect.ValueOf(mockPtr).Elem()
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		fv := v.Field(i)
		if !f.IsExported() || f.Type.Kind() != reflect.Func || !fv.IsNil() {
			continue
		}
		method, ok := strings.CutSuffix(f.Name, "Func")
		if !ok {
			continue
		}
		impl := notSupported(f.Type, lost)
		if forward {
			if fwd, ok := forwarder(method, f.Type); ok {
				impl = fwd
			}
		}
		fv.Set(reflect.MakeFunc(f.Type, impl))
	}
}

type funcImpl = func([]reflect.Value) []reflect.Value

func notSupported(ft reflect.Type, lost func() nvml.Return) funcImpl {
	return func([]reflect.Value) []reflect.Value {
		if lost != nil {
			if ret := lost(); ret != nvml.SUCCESS {
				return results(ft, ret)
			}
		}
		return results(ft, nvml.ERROR_NOT_SUPPORTED)
	}
}

// results returns zero values, with ret in every nvml.Return position.
func results(ft reflect.Type, ret nvml.Return) []reflect.Value {
	out := make([]reflect.Value, ft.NumOut())
	for i := range out {
		if ft.Out(i) == returnType {
			out[i] = reflect.ValueOf(ret)
		} else {
			out[i] = reflect.Zero(ft.Out(i))
		}
	}
	return out
}

// forwarder returns an implementation of Interface method `method` that
// calls the same-named method of its handle argument, if there is one with
// a matching signature.
func forwarder(method string, ft reflect.Type) (funcImpl, bool) {
	for _, h := range handleTypes {
		name, ok := strings.CutPrefix(method, h.prefix)
		if !ok || ft.NumIn() == 0 || ft.In(0) != h.typ {
			continue
		}
		m, ok := h.typ.MethodByName(name)
		if !ok || !sameSignature(m.Type, ft) {
			return nil, false
		}
		return func(args []reflect.Value) []reflect.Value {
			handle := args[0]
			if handle.IsNil() {
				return results(ft, nvml.ERROR_INVALID_ARGUMENT)
			}
			fn := handle.MethodByName(name)
			if ft.IsVariadic() {
				return fn.CallSlice(args[1:])
			}
			return fn.Call(args[1:])
		}, true
	}
	return nil, false
}

// sameSignature compares an interface method type (no receiver) with a
// forwarding func type whose first argument is the handle.
func sameSignature(method, fwd reflect.Type) bool {
	if method.NumIn() != fwd.NumIn()-1 || method.NumOut() != fwd.NumOut() || method.IsVariadic() != fwd.IsVariadic() {
		return false
	}
	for i := range method.NumIn() {
		if method.In(i) != fwd.In(i+1) {
			return false
		}
	}
	for i := range method.NumOut() {
		if method.Out(i) != fwd.Out(i) {
			return false
		}
	}
	return true
}
