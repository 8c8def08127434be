package sim

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/uuid"
)

// NVLink fabric information (nvmlDeviceGetGpuFabricInfo and ...InfoV): where
// a GPU stands in a multi-node NVLink fabric such as a GB200 NVL72 rack,
// whose fabric manager registers each GPU and assigns it the rack's cluster
// UUID and a clique ID. Only a model whose `nvml:` mapping says
// gpuFabric: true answers; every other GPU answers ERROR_NOT_SUPPORTED, as
// nvml.h says of a device that "doesn't support gpu fabric" (it documents
// the calls for Hopper or newer; the catalogue's x86 Hopper and Blackwell
// boards answer NOT_SUPPORTED too, the least kind of their plausible
// answers, see docs/nvml-fidelity.md). A GPU's profile entry sets its state:
//
//	fabric:
//	  clusterUUID: 2f1c4b7e-...   # the rack's NVLink domain; zero or absent: a
//	                              # single-node NVLink system (no multi-node fabric)
//	  cliqueID: 1                 # the fabric manager's clique of the GPU
//	  state: completed            # not-supported, not-started, in-progress or completed (default)
//	  status: SUCCESS             # the registration's result once completed
//	  health: [degraded-bandwidth] # see fabricHealthFields
//
// A gpuFabric GPU without a fabric entry has not been registered (state
// not-started). Until the state is completed the GPU reports a zero cluster
// UUID and clique ID, whatever its entry says: nothing has been assigned yet.
//
// Driver branches (read, not run): the versioned call and its v2 struct
// (with the health mask) are first documented in NVML's R550 reference, so
// a profile whose driverVersion is older answers nvmlDeviceGetGpuFabricInfoV
// with ERROR_FUNCTION_NOT_FOUND and LookupSymbol reports the symbol missing
// (a real library of such a driver lacks it). The v3 struct (health summary)
// is taken from R580 on; whether older branches accept it was not checked.

// Fabric states of a profile's fabric entry, as NVML_GPU_FABRIC_STATE_*.
var fabricStates = map[string]nvml.GpuFabricState{
	"not-supported": nvml.GPU_FABRIC_STATE_NOT_SUPPORTED,
	"not-started":   nvml.GPU_FABRIC_STATE_NOT_STARTED,
	"in-progress":   nvml.GPU_FABRIC_STATE_IN_PROGRESS,
	"completed":     nvml.GPU_FABRIC_STATE_COMPLETED,
}

// fabricStatuses are the registration results a fabric entry may give.
var fabricStatuses = map[string]nvml.Return{
	"SUCCESS": nvml.SUCCESS, "UNKNOWN": nvml.ERROR_UNKNOWN, "TIMEOUT": nvml.ERROR_TIMEOUT,
	"NOT_SUPPORTED": nvml.ERROR_NOT_SUPPORTED, "INSUFFICIENT_RESOURCES": nvml.ERROR_INSUFFICIENT_RESOURCES,
}

// fabricHealthFields are the health conditions a fabric entry may list and
// the field of NVML's health mask each sets to TRUE (the others of these
// read FALSE; the mask's remaining fields read NOT_SUPPORTED).
var fabricHealthFields = map[string]uint32{
	"degraded-bandwidth":      nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW,
	"route-recovery":          nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_RECOVERY,
	"route-unhealthy":         nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY,
	"access-timeout-recovery": nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ACCESS_TIMEOUT_RECOVERY,
}

// Driver branches of the versioned call and of its v3 struct.
const (
	fabricInfoVBranch  = 550
	fabricInfoV3Branch = 580
)

// Struct versions of nvmlDeviceGetGpuFabricInfoV, as nvml.h defines them.
var (
	FabricInfoV2 = nvml.STRUCT_VERSION(nvml.GpuFabricInfo_v2{}, 2)
	FabricInfoV3 = nvml.STRUCT_VERSION(nvml.GpuFabricInfo_v3{}, 3)
)

// FabricInfoV is implemented by the simulated GPUs: it answers
// nvmlDeviceGetGpuFabricInfoV for a struct of the given version
// (FabricInfoV2 or FabricInfoV3), filling the v3 struct (a v2 caller reads
// its leading fields). go-nvml's GetGpuFabricInfoV returns a handler that
// calls the C library, so callers of an in-process Server use this instead.
type FabricInfoV interface {
	GpuFabricInfoV(version uint32) (nvml.GpuFabricInfo_v3, nvml.Return)
}

var _ FabricInfoV = (*device)(nil)

// fabricSpec is the on-disk fabric entry of a GPU (deviceSpec.Fabric).
type fabricSpec struct {
	ClusterUUID string   `json:"clusterUUID"`
	CliqueID    *int     `json:"cliqueID"`
	State       string   `json:"state"`
	Status      string   `json:"status"`
	Health      []string `json:"health"`
}

// Fabric is a GPU's place in the NVLink fabric, as its profile sets it.
type Fabric struct {
	// ClusterUUID is the fabric's (rack's) UUID; zero on a single-node
	// NVLink system.
	ClusterUUID uuid.UUID
	CliqueID    uint32
	State       nvml.GpuFabricState
	// Status is the registration's result, reported once State is completed.
	Status nvml.Return
	// Health lists conditions of fabricHealthFields, sorted.
	Health []string
}

// apply merges the entry at `at` over parent (the group's fabric for a
// device entry, nil for a group) into a new Fabric.
func (s *fabricSpec) apply(at string, parent *Fabric) (*Fabric, error) {
	f := &Fabric{State: nvml.GPU_FABRIC_STATE_COMPLETED, Status: nvml.SUCCESS}
	if parent != nil {
		*f = *parent
		f.Health = slices.Clone(parent.Health)
	}
	if s.ClusterUUID != "" {
		id, err := uuid.Parse(s.ClusterUUID)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a UUID: %w", join(at, "clusterUUID"), s.ClusterUUID, err)
		}
		f.ClusterUUID = id
	}
	if s.CliqueID != nil {
		if *s.CliqueID < 0 || int64(*s.CliqueID) > int64(^uint32(0)) {
			return nil, fmt.Errorf("%s: %d is not an unsigned 32-bit clique ID", join(at, "cliqueID"), *s.CliqueID)
		}
		f.CliqueID = uint32(*s.CliqueID)
	}
	if s.State != "" {
		st, ok := fabricStates[s.State]
		if !ok {
			return nil, fmt.Errorf("%s: %q is not one of %s", join(at, "state"), s.State, strings.Join(sortedKeys(fabricStates), ", "))
		}
		f.State = st
	}
	if s.Status != "" {
		ret, ok := fabricStatuses[s.Status]
		if !ok {
			return nil, fmt.Errorf("%s: %q is not one of %s", join(at, "status"), s.Status, strings.Join(sortedKeys(fabricStatuses), ", "))
		}
		f.Status = ret
	}
	if s.Health != nil {
		f.Health = nil
		for i, h := range s.Health {
			if _, ok := fabricHealthFields[h]; !ok {
				return nil, fmt.Errorf("%s[%d]: %q is not one of %s", join(at, "health"), i, h, strings.Join(sortedKeys(fabricHealthFields), ", "))
			}
			if !slices.Contains(f.Health, h) {
				f.Health = append(f.Health, h)
			}
		}
		slices.Sort(f.Health)
	}
	return f, nil
}

// driverAtLeast reports whether driverVersion ("570.124.06") is of branch
// at least branch. A version that does not parse counts as new.
func driverAtLeast(driverVersion string, branch int) bool {
	major, _, _ := strings.Cut(driverVersion, ".")
	n, err := strconv.Atoi(major)
	return err != nil || n >= branch
}

// missingSymbol reports whether the profile's driver lacks an NVML function
// the simulated library defines (LookupSymbol answers an error for it).
func (s *Server) missingSymbol(name string) bool {
	switch name {
	case "nvmlDeviceGetGpuFabricInfoV":
		return !driverAtLeast(s.profile.DriverVersion, fabricInfoVBranch)
	case AddressingModeSymbol:
		return !driverAtLeast(s.profile.DriverVersion, addressingModeBranch)
	}
	return false
}

// FabricOverride is what a GPU's fabric reports at runtime instead of its
// profile's entry (SetFabricOverride); each field left nil keeps the
// profile's. It is how the fault file's fabric, fabric-clique and
// fabric-health lines act (faultfile.go).
type FabricOverride struct {
	// State and Status of the registration (Status is reported once State
	// is completed).
	State  *nvml.GpuFabricState
	Status nvml.Return
	// CliqueID the fabric manager assigned (reported once the registration
	// completed), as after the fabric manager placed the GPU in another
	// clique.
	CliqueID *uint32
	// Health lists the conditions of fabricHealthFields that hold (an empty
	// non-nil list: none holds).
	Health []string
}

// SetFabric replaces the state and status of a gpuFabric GPU's fabric
// registration until ClearFabric; the cluster UUID, clique and health stay
// the profile's.
func (s *Server) SetFabric(gpuUUID string, state nvml.GpuFabricState, status nvml.Return) error {
	return s.SetFabricOverride(gpuUUID, FabricOverride{State: &state, Status: status})
}

// SetFabricOverride replaces what a gpuFabric GPU's fabric reports (each
// field set of o) until ClearFabric or the next override. Health conditions
// must be of fabricHealthFields.
func (s *Server) SetFabricOverride(gpuUUID string, o FabricOverride) error {
	for _, h := range o.Health {
		if _, ok := fabricHealthFields[h]; !ok {
			return fmt.Errorf("fabric health %q is not one of %s", h, strings.Join(sortedKeys(fabricHealthFields), ", "))
		}
	}
	if o.Health != nil {
		o.Health = slices.Clone(o.Health)
		slices.Sort(o.Health)
		o.Health = slices.Compact(o.Health)
	}
	return s.setFabric(gpuUUID, &o)
}

// ClearFabric undoes SetFabric and SetFabricOverride: the GPU reports its
// profile's registration again (one that was in progress completes).
func (s *Server) ClearFabric(gpuUUID string) error { return s.setFabric(gpuUUID, nil) }

func (s *Server) setFabric(gpuUUID string, o *FabricOverride) error {
	d, err := s.gpuByUUID(gpuUUID)
	if err != nil {
		return err
	}
	if !d.model().NVML.GPUFabric {
		return fmt.Errorf("GPU %s (model %s) has no NVLink fabric (the model's gpuFabric is false): its fabric state cannot be set",
			gpuUUID, d.model().Name)
	}
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	s.faults.gpus[d].fabric = o
	return nil
}

// fabricInfo is what NVML reports of the GPU's fabric: zero UUID and clique
// until the registration completed.
func (d *device) fabricInfo() nvml.GpuFabricInfo_v3 {
	f := d.gpu.Fabric
	if f == nil {
		f = &Fabric{State: nvml.GPU_FABRIC_STATE_NOT_STARTED, Status: nvml.SUCCESS}
	}
	d.srv.faults.mu.Lock()
	if o := d.srv.faults.gpus[d].fabric; o != nil {
		g := *f
		if o.State != nil {
			g.State, g.Status = *o.State, o.Status
		}
		if o.CliqueID != nil {
			g.CliqueID = *o.CliqueID
		}
		if o.Health != nil {
			g.Health = o.Health
		}
		f = &g
	}
	d.srv.faults.mu.Unlock()
	info := nvml.GpuFabricInfo_v3{State: uint8(f.State), Status: uint32(f.Status), HealthMask: fabricHealthMask(f.Health),
		HealthSummary: fabricHealthSummary(f.Health)}
	if f.State == nvml.GPU_FABRIC_STATE_COMPLETED {
		info.ClusterUuid, info.CliqueId = f.ClusterUUID, f.CliqueID
	}
	return info
}

func fabricHealthMask(health []string) uint32 {
	var mask uint32
	for name, shift := range fabricHealthFields {
		v := uint32(nvml.GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_FALSE) // every field: TRUE 1, FALSE 2
		if slices.Contains(health, name) {
			v = nvml.GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE
		}
		mask |= v << shift
	}
	return mask
}

// fabricHealthSummary is the v3 summary (not verified on hardware): a route
// that is unhealthy makes the fabric unhealthy, any other condition limits
// its capacity.
func fabricHealthSummary(health []string) uint8 {
	switch {
	case slices.Contains(health, "route-unhealthy"):
		return nvml.GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY
	case len(health) > 0:
		return nvml.GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY
	}
	return nvml.GPU_FABRIC_HEALTH_SUMMARY_HEALTHY
}

// setFabricFuncs sets nvmlDeviceGetGpuFabricInfo on a gpuFabric GPU; on any
// other it is left to fillUnset (ERROR_NOT_SUPPORTED).
func (d *device) setFabricFuncs() {
	if !d.model().NVML.GPUFabric {
		return
	}
	d.GetGpuFabricInfoFunc = func() (nvml.GpuFabricInfo, nvml.Return) {
		v := d.fabricInfo()
		return nvml.GpuFabricInfo{ClusterUuid: v.ClusterUuid, Status: v.Status, CliqueId: v.CliqueId, State: v.State}, nvml.SUCCESS
	}
}

// GpuFabricInfoV answers nvmlDeviceGetGpuFabricInfoV (FabricInfoV).
func (d *device) GpuFabricInfoV(version uint32) (nvml.GpuFabricInfo_v3, nvml.Return) {
	driver := d.srv.profile.DriverVersion
	switch {
	case !driverAtLeast(driver, fabricInfoVBranch):
		return nvml.GpuFabricInfo_v3{}, nvml.ERROR_FUNCTION_NOT_FOUND
	case version != FabricInfoV2 && (version != FabricInfoV3 || !driverAtLeast(driver, fabricInfoV3Branch)):
		return nvml.GpuFabricInfo_v3{}, nvml.ERROR_ARGUMENT_VERSION_MISMATCH
	}
	if ret := d.lostReturn(); ret != nvml.SUCCESS {
		return nvml.GpuFabricInfo_v3{}, ret
	}
	if !d.model().NVML.GPUFabric {
		return nvml.GpuFabricInfo_v3{}, nvml.ERROR_NOT_SUPPORTED
	}
	info := d.fabricInfo()
	info.Version = version
	if version == FabricInfoV2 {
		info.HealthSummary = 0
	}
	return info, nvml.SUCCESS
}
