package discovery

import (
	"context"
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	guuid "github.com/google/uuid"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/model"
)

// FabricInfoV is implemented by devices of backends that answer
// nvmlDeviceGetGpuFabricInfoV themselves (test/sim's GPUs): go-nvml's
// GetGpuFabricInfoV returns a handler whose V2 calls the C library, which
// only go-nvml's own devices can take. version is the struct's version
// field; the answer is the v3 struct, whose leading fields are v2's.
type FabricInfoV interface {
	GpuFabricInfoV(version uint32) (nvml.GpuFabricInfo_v3, nvml.Return)
}

// The fabric calls: the versioned one is absent from drivers before R550,
// the unversioned one from drivers older than Hopper support.
const (
	fabricInfoSymbol  = "nvmlDeviceGetGpuFabricInfo"
	fabricInfoVSymbol = "nvmlDeviceGetGpuFabricInfoV"
)

// optionalCalls are the NVML functions discovery calls only where the
// library has them: a call to a function the library lacks kills the process
// (go-nvml binds lazily), so each is looked up once, before discovery makes
// it.
type optionalCalls struct{ fabric, fabricV, addressingMode, moduleID bool }

func lookupOptionalCalls(lib nvml.Interface) optionalCalls {
	has := func(sym string) bool { return lib.Extensions().LookupSymbol(sym) == nil }
	return optionalCalls{fabric: has(fabricInfoSymbol), fabricV: has(fabricInfoVSymbol), addressingMode: has(addressingModeSymbol),
		moduleID: has(moduleIDSymbol)}
}

// fabricHealth are the health mask's fields the model keeps, by shift; each
// is 2 bits: 0 not reported, 1 the condition holds, 2 it does not.
var fabricHealth = map[string]uint32{
	model.FabricDegradedBandwidth:     nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW,
	model.FabricRouteRecovery:         nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_RECOVERY,
	model.FabricRouteUnhealthy:        nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY,
	model.FabricAccessTimeoutRecovery: nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ACCESS_TIMEOUT_RECOVERY,
}

// fabric reads the GPU's NVLink fabric information: the versioned call
// (with the health mask) where the library has it, else the unversioned
// one. A GPU without a fabric (NOT_SUPPORTED) has none (nil). The facts
// are optional, as the NVLink topology is: an unexpected NVML error leaves
// them out (logged), so the GPU is published without a clique rather than
// not at all; only the errors that make every other query of the GPU fail
// (lost, reset required, a library-wide failure) are returned.
func fabric(ctx context.Context, dev nvml.Device, uuid string, calls optionalCalls) (*model.Fabric, error) {
	var f *model.Fabric
	ret := nvml.ERROR_FUNCTION_NOT_FOUND
	if calls.fabricV {
		var v nvml.GpuFabricInfo_v2
		v, ret = fabricInfoV2(dev)
		if ret == nvml.SUCCESS {
			f = fabricFrom(v.ClusterUuid, v.Status, v.CliqueId, v.State)
			f.Health = healthFrom(v.HealthMask)
		}
	}
	// Without the versioned call, or with a driver that does not take its
	// v2 struct, the unversioned one still answers (without health).
	if (ret == nvml.ERROR_FUNCTION_NOT_FOUND || ret == nvml.ERROR_ARGUMENT_VERSION_MISMATCH) && calls.fabric {
		var v nvml.GpuFabricInfo
		v, ret = dev.GetGpuFabricInfo()
		if ret == nvml.SUCCESS {
			f = fabricFrom(v.ClusterUuid, v.Status, v.CliqueId, v.State)
		}
	}
	switch {
	case ret == nvml.SUCCESS:
		return f, nil
	case ret == nvml.ERROR_NOT_SUPPORTED:
		return nil, nil
	case ret == nvml.ERROR_FUNCTION_NOT_FOUND && !calls.fabric:
		return nil, nil // a driver without fabric calls: no fabric
	}
	err := nvmlError("get GPU fabric info", ret)
	if libraryFailure(err) || errors.Is(err, nvml.ERROR_GPU_IS_LOST) || errors.Is(err, nvml.ERROR_RESET_REQUIRED) {
		return nil, err
	}
	klog.FromContext(ctx).Error(err, "NVLink fabric unknown, publishing no clique", "uuid", uuid)
	return nil, nil
}

// FabricReader reads the NVLink fabric of a running node's GPUs again,
// by the code Discover reads it with (the same calls, the same model), so
// that a fact read later is what a fresh discovery would have read.
type FabricReader struct {
	lib   nvml.Interface
	calls optionalCalls
}

// NewFabricReader looks up the library's fabric calls once; lib must be
// initialized.
func NewFabricReader(lib nvml.Interface) *FabricReader {
	return &FabricReader{lib: lib, calls: lookupOptionalCalls(lib)}
}

// Read returns the fabric of the GPU with the given UUID, as Discover
// would (nil: none). An error means the GPU does not answer (lost, reset
// required, no handle) or the library failed.
func (r *FabricReader) Read(ctx context.Context, uuid string) (*model.Fabric, error) {
	dev, ret := r.lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return nil, nvmlError("get handle by UUID", ret)
	}
	return fabric(ctx, dev, uuid, r.calls)
}

// FabricCapable reports whether a GPU's fabric, as discovered, can change
// while the node runs: NVML answered a registration state other than
// not-supported. Only such GPUs are worth reading again.
func FabricCapable(f *model.Fabric) bool {
	return f != nil && f.State != model.FabricNotSupported
}

// fabricInfoV2 makes the versioned call with a v2 struct.
func fabricInfoV2(dev nvml.Device) (nvml.GpuFabricInfo_v2, nvml.Return) {
	f, ok := dev.(FabricInfoV)
	if !ok {
		return dev.GetGpuFabricInfoV().V2()
	}
	v, ret := f.GpuFabricInfoV(nvml.STRUCT_VERSION(nvml.GpuFabricInfo_v2{}, 2))
	return nvml.GpuFabricInfo_v2{Version: v.Version, ClusterUuid: v.ClusterUuid, Status: v.Status, CliqueId: v.CliqueId,
		State: v.State, HealthMask: v.HealthMask}, ret
}

// fabricFrom turns NVML's fields into the model. The cluster, clique and
// status mean something only once the registration completed; before, the
// GPU has neither cluster nor clique.
func fabricFrom(cluster [16]uint8, status, clique uint32, state uint8) *model.Fabric {
	f := &model.Fabric{State: fabricState(state)}
	if f.State != model.FabricCompleted {
		return f
	}
	if cluster != [16]uint8{} {
		f.ClusterUUID, f.CliqueID = guuid.UUID(cluster).String(), clique
	}
	if st := nvml.Return(status); st != nvml.SUCCESS {
		f.Error = ReturnError(st).Error()
	}
	return f
}

func fabricState(state uint8) model.FabricState {
	switch state {
	case nvml.GPU_FABRIC_STATE_NOT_SUPPORTED:
		return model.FabricNotSupported
	case nvml.GPU_FABRIC_STATE_NOT_STARTED:
		return model.FabricNotStarted
	case nvml.GPU_FABRIC_STATE_IN_PROGRESS:
		return model.FabricInProgress
	case nvml.GPU_FABRIC_STATE_COMPLETED:
		return model.FabricCompleted
	}
	return model.FabricState(fmt.Sprintf("state-%d", state))
}

// healthFrom decodes the conditions the mask reports; nil when it reports
// none of them.
func healthFrom(mask uint32) map[string]bool {
	var h map[string]bool
	for name, shift := range fabricHealth {
		switch mask >> shift & 0x3 {
		case nvml.GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE: // every field: TRUE 1, FALSE 2
			h = withCondition(h, name, true)
		case nvml.GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_FALSE:
			h = withCondition(h, name, false)
		}
	}
	return h
}

func withCondition(h map[string]bool, name string, holds bool) map[string]bool {
	if h == nil {
		h = map[string]bool{}
	}
	h[name] = holds
	return h
}

// logCliques reports a node whose attached GPUs are in different cliques:
// NVIDIA's ComputeDomain plugin refuses such a node (one IMEX domain per
// node); gpudra publishes each GPU's own clique.
func logCliques(ctx context.Context, gpus []model.GPU) {
	cliques := map[string]int{}
	for _, g := range gpus {
		if c := g.Fabric.Clique(); c != "" {
			cliques[c]++
		}
	}
	if len(cliques) > 1 {
		klog.FromContext(ctx).Info("GPUs of this node are in different NVLink cliques", "cliques", cliques)
	}
}
