package sim

import (
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// Fault simulation. A Server models what NVML tells a health monitor about
// a failing GPU:
//
//   - event sets (EventSetCreate, RegisterEvents, GetSupportedEventTypes,
//     EventSetWait, EventSetFree) delivering critical XID and double-bit ECC
//     events injected with InjectXID and InjectDoubleBitECC;
//   - the volatile and aggregate ECC counters (GetTotalEccErrors);
//   - the GPU recovery action the driver asks for (GetFieldValues with
//     FI_DEV_GET_GPU_RECOVERY_ACTION, table xidRecovery): GPU reset after
//     a fatal XID, node reboot after XID 79, none after a contained
//     double-bit ECC error. Like real drivers
//     before R550, a profile whose driverVersion is older than 550 answers
//     that field with ERROR_NOT_SUPPORTED;
//   - a GPU fallen off the bus (XID 79, or SetLost): every call on it and
//     every lookup of its handle answers ERROR_GPU_IS_LOST (see lost.go).
//
// Reset undoes all of it, as a GPU reset or reboot would. Faults only exist
// in simulation: nothing here touches a real GPU.

// Event types the simulated GPUs support.
const supportedEvents = nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError

// eventQueueLength bounds an event set's queue; further events are dropped,
// as a slow reader of real NVML loses them too.
const eventQueueLength = 256

// xidRecovery is the recovery action the simulated driver reports after an
// XID: the real driver asks for a reset after errors that leave the GPU in a
// bad state.
var xidRecovery = map[uint64]nvml.DeviceGpuRecoveryAction{
	48: nvml.GPU_RECOVERY_ACTION_GPU_RESET, 62: nvml.GPU_RECOVERY_ACTION_GPU_RESET,
	64: nvml.GPU_RECOVERY_ACTION_GPU_RESET, 79: nvml.GPU_RECOVERY_ACTION_NODE_REBOOT,
	95: nvml.GPU_RECOVERY_ACTION_GPU_RESET, 119: nvml.GPU_RECOVERY_ACTION_GPU_RESET,
	120: nvml.GPU_RECOVERY_ACTION_GPU_RESET, 140: nvml.GPU_RECOVERY_ACTION_GPU_RESET,
}

// faultBook holds the fault state of all GPUs of a server and its event sets.
type faultBook struct {
	mu   sync.Mutex
	gpus map[*device]*gpuFaults
	sets map[*eventSet]struct{}
}

type gpuFaults struct {
	recovery      nvml.DeviceGpuRecoveryAction
	dbeVolatile   uint64
	dbeAggregate  uint64
	sbeVolatile   uint64
	sbeAggregate  uint64
	registrations map[*eventSet]uint64
	// thermal: the GPU throttles for heat (telemetry.go).
	thermal bool
	// fabric, when set, replaces what the GPU's NVLink fabric reports
	// (fabric.go, SetFabricOverride); Reset leaves it alone.
	fabric *FabricOverride
}

// eventSet is a simulated nvmlEventSet.
type eventSet struct {
	mock.EventSet
	book  *faultBook
	queue chan nvml.EventData
	freed bool
}

// installFaults adds the fault model to a server whose devices exist.
func (s *Server) installFaults() {
	b := &faultBook{gpus: map[*device]*gpuFaults{}, sets: map[*eventSet]struct{}{}}
	s.faults = b
	for _, d := range s.devices {
		b.gpus[d] = &gpuFaults{registrations: map[*eventSet]uint64{}}
		d.setFaultFuncs(b)
	}
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		if ret := s.initialized(); ret != nvml.SUCCESS {
			return nil, ret
		}
		return b.newEventSet(), nvml.SUCCESS
	}
	s.EventSetWaitFunc = func(set nvml.EventSet, timeoutMs uint32) (nvml.EventData, nvml.Return) {
		if set == nil {
			return nvml.EventData{}, nvml.ERROR_INVALID_ARGUMENT
		}
		return set.Wait(timeoutMs)
	}
	s.EventSetFreeFunc = func(set nvml.EventSet) nvml.Return {
		if set == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		return set.Free()
	}
}

func (b *faultBook) newEventSet() *eventSet {
	e := &eventSet{book: b, queue: make(chan nvml.EventData, eventQueueLength)}
	e.WaitFunc = e.wait
	e.FreeFunc = e.free
	fillUnset(&e.EventSet, false)
	b.mu.Lock()
	b.sets[e] = struct{}{}
	b.mu.Unlock()
	return e
}

func (e *eventSet) wait(timeoutMs uint32) (nvml.EventData, nvml.Return) {
	e.book.mu.Lock()
	freed := e.freed
	e.book.mu.Unlock()
	if freed {
		return nvml.EventData{}, nvml.ERROR_INVALID_ARGUMENT
	}
	select {
	case ev := <-e.queue:
		return ev, nvml.SUCCESS
	default:
	}
	t := time.NewTimer(time.Duration(timeoutMs) * time.Millisecond)
	defer t.Stop()
	select {
	case ev := <-e.queue:
		return ev, nvml.SUCCESS
	case <-t.C:
		return nvml.EventData{}, nvml.ERROR_TIMEOUT
	}
}

func (e *eventSet) free() nvml.Return {
	b := e.book
	b.mu.Lock()
	defer b.mu.Unlock()
	if e.freed {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	e.freed = true
	delete(b.sets, e)
	for _, g := range b.gpus {
		delete(g.registrations, e)
	}
	return nvml.SUCCESS
}

// emitLocked queues an event for every set registered for its type on d.
// The caller holds b.mu.
func (b *faultBook) emitLocked(d *device, eventType, data uint64) {
	b.emitScopedLocked(d, eventType, data, noInstance, noInstance)
}

// noInstance is the GPU/compute instance ID of an event no instance is
// responsible for (nvml.h, nvmlEventData_t).
const noInstance = 0xFFFFFFFF

// emitScopedLocked is emitLocked for an event attributable to GPU instance
// gi and compute instance ci (noInstance: none).
func (b *faultBook) emitScopedLocked(d *device, eventType, data uint64, gi, ci uint32) {
	for set, mask := range b.gpus[d].registrations {
		if mask&eventType == 0 {
			continue
		}
		ev := nvml.EventData{Device: d, EventType: eventType, EventData: data,
			GpuInstanceId: gi, ComputeInstanceId: ci}
		select {
		case set.queue <- ev:
		default: // queue full: dropped
		}
	}
}

// recoveryActionSupported: the driver reports FI_DEV_GET_GPU_RECOVERY_ACTION
// from branch R550 on. A version that does not parse counts as new.
func recoveryActionSupported(driverVersion string) bool { return driverAtLeast(driverVersion, 550) }

func (d *device) setFaultFuncs(b *faultBook) {
	state := func() (*gpuFaults, func()) {
		b.mu.Lock()
		return b.gpus[d], b.mu.Unlock
	}
	// A lost GPU answers nothing: finishHandle guards these calls too.
	d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) { return supportedEvents, nvml.SUCCESS }
	d.RegisterEventsFunc = func(types uint64, set nvml.EventSet) nvml.Return {
		es, ok := set.(*eventSet)
		if !ok || es.book != b || types&^supportedEvents != 0 {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		g, unlock := state()
		defer unlock()
		if es.freed {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		g.registrations[es] |= types
		return nvml.SUCCESS
	}
	d.GetTotalEccErrorsFunc = func(errType nvml.MemoryErrorType, counter nvml.EccCounterType) (uint64, nvml.Return) {
		if !d.model().ECC || !d.gpu.ECCEnabled {
			return 0, nvml.ERROR_NOT_SUPPORTED // nvml.h: requires ECC mode to be enabled
		}
		g, unlock := state()
		defer unlock()
		switch {
		case errType == nvml.MEMORY_ERROR_TYPE_UNCORRECTED && counter == nvml.VOLATILE_ECC:
			return g.dbeVolatile, nvml.SUCCESS
		case errType == nvml.MEMORY_ERROR_TYPE_UNCORRECTED && counter == nvml.AGGREGATE_ECC:
			return g.dbeAggregate, nvml.SUCCESS
		case errType == nvml.MEMORY_ERROR_TYPE_CORRECTED && counter == nvml.VOLATILE_ECC:
			return g.sbeVolatile, nvml.SUCCESS
		case errType == nvml.MEMORY_ERROR_TYPE_CORRECTED && counter == nvml.AGGREGATE_ECC:
			return g.sbeAggregate, nvml.SUCCESS
		}
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
	recoverySupported := recoveryActionSupported(d.srv.profile.DriverVersion)
	d.GetFieldValuesFunc = func(values []nvml.FieldValue) nvml.Return {
		g, unlock := state()
		defer unlock()
		for i := range values {
			v := &values[i]
			if v.FieldId != nvml.FI_DEV_GET_GPU_RECOVERY_ACTION || !recoverySupported {
				v.NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
				continue
			}
			v.NvmlReturn = uint32(nvml.SUCCESS)
			v.ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_INT)
			v.Value = [8]byte{}
			binary.LittleEndian.PutUint32(v.Value[:4], uint32(g.recovery))
			v.Timestamp = time.Now().UnixMicro()
		}
		return nvml.SUCCESS
	}
}

// gpuByUUID finds a physical GPU of the server.
func (s *Server) gpuByUUID(id string) (*device, error) {
	for _, d := range s.devices {
		if d.uuid == id {
			return d, nil
		}
	}
	return nil, fmt.Errorf("no simulated GPU with UUID %q on node %s", id, s.nodeName)
}

// InjectXID simulates the driver reporting XID xid on the GPU: a critical
// XID event to every event set registered for it, the recovery action the
// driver would ask for, and for XID 79 (fallen off the bus) a lost GPU.
func (s *Server) InjectXID(gpuUUID string, xid uint64) error {
	return s.InjectMIGXID(gpuUUID, xid, noInstance, noInstance)
}

// InjectMIGXID is InjectXID for an XID attributable to GPU instance gi
// and compute instance ci of the GPU (ci may be noInstance, 0xFFFFFFFF):
// the event carries their IDs, as NVML's does with MIG enabled. The GPU
// instance (and the compute instance, if given) must exist. The recovery
// action follows the XID as for a GPU-wide one: whether the driver asks
// less for an XID contained in one instance is not known here.
func (s *Server) InjectMIGXID(gpuUUID string, xid uint64, gi, ci uint32) error {
	d, err := s.gpuByUUID(gpuUUID)
	if err != nil {
		return err
	}
	if gi != noInstance {
		if err := d.checkInstance(gi, ci); err != nil {
			return err
		}
	}
	b := s.faults
	b.mu.Lock()
	defer b.mu.Unlock()
	g := b.gpus[d]
	if action, ok := xidRecovery[xid]; ok && action > g.recovery {
		g.recovery = action
	}
	if xid == 48 {
		g.dbeVolatile++
		g.dbeAggregate++
	}
	if xid == 79 {
		// Lost before the event is out: whoever reacts to it finds the GPU gone.
		d.lost.Store(true)
	}
	b.emitScopedLocked(d, nvml.EventTypeXidCriticalError, xid, gi, ci)
	return nil
}

// checkInstance reports whether GPU instance gi (and compute instance ci,
// unless noInstance) exists on d.
func (d *device) checkInstance(gi, ci uint32) error {
	d.srv.mu.Lock()
	defer d.srv.mu.Unlock()
	g, ok := d.gis[gi]
	if !ok {
		return fmt.Errorf("GPU %s has no GPU instance %d", d.uuid, gi)
	}
	if _, ok := g.cis[ci]; ci != noInstance && !ok {
		return fmt.Errorf("GPU instance %d of %s has no compute instance %d", gi, d.uuid, ci)
	}
	return nil
}

// InjectDoubleBitECC simulates an uncorrectable (double-bit) ECC error: the
// counters go up and a double-bit ECC event is delivered. The driver asks
// for no recovery action: on Ampere and later such an error is contained
// (XID 94 in NVIDIA's XID catalogue: restart the application; the row
// remapping waits for the next reset), and every MIG-capable or data-center
// model of the catalogue is Ampere or later. That is the least kind answer
// for a health monitor, which gets no pending -> none transition to see the
// reset by; an uncontained error is InjectXID(95), which asks for a reset.
// (Read, not run: no real recovery-action reading after an ECC error here.)
func (s *Server) InjectDoubleBitECC(gpuUUID string) error {
	d, err := s.gpuByUUID(gpuUUID)
	if err != nil {
		return err
	}
	b := s.faults
	b.mu.Lock()
	defer b.mu.Unlock()
	g := b.gpus[d]
	g.dbeVolatile++
	g.dbeAggregate++
	b.emitLocked(d, nvml.EventTypeDoubleBitEccError, 0)
	return nil
}

// SetLost marks the GPU as fallen off the bus (or back) without an event:
// only a probe notices. A lost GPU answers no call at all (see lost.go).
func (s *Server) SetLost(gpuUUID string, lost bool) error {
	d, err := s.gpuByUUID(gpuUUID)
	if err != nil {
		return err
	}
	d.lost.Store(lost)
	return nil
}

// Reset simulates a GPU reset: the GPU answers again (its handles work
// again, as after a reset the same GPU is found again), no recovery action is
// pending and the volatile ECC counters start from zero. Aggregate counters
// persist, as on real GPUs, and so does the MIG mode (a pending one, on
// Ampere, becomes current), but its GPU and compute instances are gone:
// they do not survive a GPU reset.
func (s *Server) Reset(gpuUUID string) error {
	d, err := s.gpuByUUID(gpuUUID)
	if err != nil {
		return err
	}
	s.mu.Lock()
	if d.migPending != d.migMode {
		// A pending MIG mode (Ampere) takes effect with the reset.
		d.migMode = d.migPending
		s.persistLocked()
	}
	if len(d.gis) > 0 {
		for _, gi := range d.gis {
			gi.destroyLocked()
		}
		s.persistLocked()
	}
	s.mu.Unlock()
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	g := s.faults.gpus[d]
	d.lost.Store(false)
	d.resetRequired.Store(false)
	d.unbound.Store(false)
	g.recovery = nvml.GPU_RECOVERY_ACTION_NONE
	g.dbeVolatile, g.sbeVolatile = 0, 0
	g.thermal = false
	return nil
}
