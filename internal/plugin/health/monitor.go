// Package health watches the node's GPUs through NVML and turns what it
// sees into device health: taints for the ResourceSlice (KEP-5055), the
// kubelet's health stream (KEP-4680) and the health in claim status.
//
// Two sources feed it. An NVML event set delivers critical XID errors and
// double-bit ECC errors as they happen; XIDs on the ignore list (caused by
// applications, see DefaultIgnoredXIDs) are counted and otherwise dropped.
// A periodic probe asks every GPU whether it still answers (a GPU that fell
// off the bus answers ERROR_GPU_IS_LOST), which recovery action the driver
// asks for, and whether its volatile uncorrectable ECC counter is above
// the last value read; that counter starts at zero when the driver loads,
// so a non-zero count at the first probe is an error too.
//
// Each finding is a Condition on the physical GPU, keyed by taint key.
// Conditions that require a reset (fatal XIDs, ECC, a recovery action) are
// cleared once the driver's recovery action, having been pending, reads none
// again, or once the volatile ECC counter falls back (the sign of a reset on
// drivers without the recovery action, and after errors that asked for
// none); a lost GPU is healthy once it answers;
// degraded conditions without a recovery action expire after a hold time.
// MIG devices share the conditions of their parent GPU. Conditions survive
// restarts of the plugin within one boot (persist.go).
package health

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// GPU is a physical GPU to watch.
type GPU struct {
	UUID string
	// Name is its device name in the ResourceSlice (for logs).
	Name string
	// Device is the GPU's NVML handle; nil when NVML gave none (a GPU fallen
	// off the bus answers nothing, not even its handle). Such a GPU starts
	// lost; each probe looks its handle up again (by PCIBusID, else by
	// UUID) and, once the same GPU answers, probes it like any other. It is
	// not registered for events.
	Device nvml.Device
	// PCIBusID finds a GPU without Device again.
	PCIBusID string
	// Unreachable is the value of the lost condition a GPU without Device
	// starts with ("unreachable" when empty).
	Unreachable string
}

// Config of a Monitor.
type Config struct {
	Lib  nvml.Interface
	GPUs []GPU
	// IgnoredXIDs are dropped (DefaultIgnoredXIDs when nil).
	IgnoredXIDs []uint64
	// ProbeInterval between probes of every GPU (default 5s).
	ProbeInterval time.Duration
	// DegradedHold is how long a degraded condition without a pending
	// recovery action lasts (default 10m).
	DegradedHold time.Duration
	// Metrics, optional.
	Metrics *Metrics
	// StateFile keeps the conditions across restarts of the plugin (see
	// persist.go); empty: only in memory.
	StateFile string
	// BootID of the running boot: a state file of another boot is discarded.
	BootID string
	// PassedThrough reports a GPU (by UUID) that a claim has handed to a
	// virtual machine (bound to vfio-pci): NVML no longer reaches it, which
	// says nothing about its health, so it is not probed and keeps its
	// conditions. Optional.
	PassedThrough func(uuid string) bool
	// now, for tests.
	now func() time.Time
}

// Monitor keeps the health of the node's GPUs.
type Monitor struct {
	cfg     Config
	ignored map[uint64]bool
	byDev   map[nvml.Device]string // event handle -> UUID

	mu    sync.Mutex
	gpus  map[string]*gpuState // by UUID
	names map[string]string    // UUID -> device name
	subs  map[chan struct{}]struct{}
	// saving: StartSaving was called (and StopSaving not since).
	saving bool

	// saveMu orders the writes of the state file (taken before mu).
	saveMu sync.Mutex
	// disk is the state file's content as this monitor last read or wrote it.
	disk    []byte
	saveErr string // last save error logged
	// restored: what New did with the state file, logged by Run.
	restored restoreNote
	// found are the handles of GPUs that had none at start (see device).
	found map[string]nvml.Device
	// onXID is told every XID (OnXID).
	onXID func(uuid string, xid uint64)
}

// New creates a monitor; Run starts it.
func New(cfg Config) *Monitor {
	if cfg.ProbeInterval <= 0 {
		cfg.ProbeInterval = 5 * time.Second
	}
	if cfg.DegradedHold <= 0 {
		cfg.DegradedHold = 10 * time.Minute
	}
	if cfg.IgnoredXIDs == nil {
		cfg.IgnoredXIDs = DefaultIgnoredXIDs
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	m := &Monitor{cfg: cfg, ignored: map[uint64]bool{}, byDev: map[nvml.Device]string{},
		gpus: map[string]*gpuState{}, names: map[string]string{}, subs: map[chan struct{}]struct{}{}, found: map[string]nvml.Device{}}
	for _, x := range cfg.IgnoredXIDs {
		m.ignored[x] = true
	}
	for _, g := range cfg.GPUs {
		m.gpus[g.UUID] = &gpuState{conds: map[string]Condition{}}
		m.names[g.UUID] = g.Name
		if g.Device != nil {
			m.byDev[g.Device] = g.UUID
			continue
		}
		value := g.Unreachable
		if value == "" {
			value = lostUnreachable
		}
		m.gpus[g.UUID].set(lostCondition(value, cfg.now()))
	}
	if cfg.StateFile != "" {
		m.restored = m.restore()
	}
	cfg.Metrics.setHealthOf(m.Snapshot(), cfg.GPUs)
	return m
}

// OnXID makes the monitor call f with every XID it receives (ignored ones
// too) and the UUID of its GPU; call before Run.
func (m *Monitor) OnXID(f func(uuid string, xid uint64)) { m.onXID = f }

// SetMetrics makes the monitor record its metrics in x; call before Run.
func (m *Monitor) SetMetrics(x *Metrics) {
	m.cfg.Metrics = x
	x.setHealthOf(m.Snapshot(), m.cfg.GPUs)
}

// Run watches events and probes every GPU each ProbeInterval (the first
// time at once) until ctx is done.
func (m *Monitor) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	logger.Info("GPU health monitor started", "gpus", len(m.cfg.GPUs), "probeInterval", m.cfg.ProbeInterval,
		"ignoredXIDs", FormatXIDs(m.cfg.IgnoredXIDs))
	m.restored.log(logger, m.cfg.StateFile)
	var wg sync.WaitGroup
	wg.Go(func() { m.watchEvents(ctx) })
	tick := time.NewTicker(m.cfg.ProbeInterval)
	defer tick.Stop()
	for {
		m.ProbeAll(ctx)
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-tick.C:
		}
	}
}

// Snapshot returns the current health.
func (m *Monitor) Snapshot() Snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := Snapshot{GPUs: make(map[string][]Condition, len(m.gpus))}
	for id, g := range m.gpus {
		if c := g.snapshot(); c != nil {
			s.GPUs[id] = c
		}
		if c := g.migSnapshot(); c != nil {
			if s.MIG == nil {
				s.MIG = map[string]map[int][]Condition{}
			}
			s.MIG[id] = c
		}
	}
	return s
}

// Subscribe returns a channel that receives a value after every change,
// and a function that ends the subscription. Changes that arrive while a
// value is pending are folded into it.
func (m *Monitor) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	m.mu.Lock()
	m.subs[ch] = struct{}{}
	m.mu.Unlock()
	return ch, func() {
		m.mu.Lock()
		delete(m.subs, ch)
		m.mu.Unlock()
	}
}

// update runs f on a GPU's state under the lock and notifies subscribers
// when f reports a change.
func (m *Monitor) update(ctx context.Context, uuid string, f func(g *gpuState) bool) {
	m.mu.Lock()
	g, ok := m.gpus[uuid]
	if !ok {
		m.mu.Unlock()
		return
	}
	if !f(g) {
		m.mu.Unlock()
		m.save(ctx) // the ECC baseline may have moved
		return
	}
	conds := g.snapshot()
	m.mu.Unlock()
	klog.FromContext(ctx).Info("GPU health changed", "gpu", m.names[uuid], "uuid", uuid,
		"health", Snapshot{GPUs: map[string][]Condition{uuid: conds}}.Health(uuid), "conditions", describe(conds))
	m.save(ctx)
	m.changed()
}

// changed updates the metrics and notifies the subscribers.
func (m *Monitor) changed() {
	m.cfg.Metrics.setHealthOf(m.Snapshot(), m.cfg.GPUs)
	m.mu.Lock()
	subs := slices.Collect(maps.Keys(m.subs))
	m.mu.Unlock()
	for _, ch := range subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func describe(conds []Condition) []string {
	out := make([]string, 0, len(conds))
	for _, c := range conds {
		out = append(out, fmt.Sprintf("%s=%s:%s (%s)", c.Key, c.Value, c.Effect, c.Message))
	}
	return out
}

// watchEvents registers every GPU with an NVML event set and handles events
// until ctx is done. Without event support the probe alone watches.
func (m *Monitor) watchEvents(ctx context.Context) {
	logger := klog.FromContext(ctx)
	set, ret := m.cfg.Lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		logger.Error(ret, "NVML events unavailable; GPU health relies on the periodic probe")
		return
	}
	defer func() { _ = set.Free() }()
	const wanted = nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError
	registered := 0
	for _, g := range m.cfg.GPUs {
		if g.Device == nil {
			logger.V(2).Info("GPU had no NVML handle at start; probing only", "gpu", g.Name)
			continue
		}
		var supported uint64
		ret := m.timed("GetSupportedEventTypes", func() nvml.Return {
			var r nvml.Return
			supported, r = g.Device.GetSupportedEventTypes()
			return r
		})
		if ret != nvml.SUCCESS {
			logger.Info("GPU reports no event support; probing only", "gpu", g.Name, "error", ret.Error())
			continue
		}
		mask := supported & wanted
		if mask == 0 {
			continue
		}
		ret = m.timed("RegisterEvents", func() nvml.Return { return g.Device.RegisterEvents(mask, set) })
		switch ret {
		case nvml.SUCCESS:
			registered++
		case nvml.ERROR_GPU_IS_LOST:
			m.setLost(ctx, g.UUID, "gpu-is-lost")
		default:
			logger.Error(ret, "Registering for NVML events failed; probing only", "gpu", g.Name)
		}
	}
	logger.V(2).Info("Registered for NVML events", "gpus", registered)
	for ctx.Err() == nil {
		data, ret := set.Wait(1000)
		switch ret {
		case nvml.SUCCESS:
			m.handleEvent(ctx, data)
		case nvml.ERROR_TIMEOUT:
		default:
			logger.V(2).Info("NVML event wait failed", "error", ret.Error())
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

func (m *Monitor) handleEvent(ctx context.Context, ev nvml.EventData) {
	logger := klog.FromContext(ctx)
	parent := parentOf(ev.Device)
	uuid, ok := m.byDev[parent]
	if !ok && parent != nil {
		id, ret := parent.GetUUID()
		if ret != nvml.SUCCESS {
			logger.Error(ret, "NVML event for an unknown GPU", "type", ev.EventType, "data", ev.EventData)
			return
		}
		uuid = id
	}
	now := m.cfg.now()
	switch ev.EventType {
	case nvml.EventTypeXidCriticalError:
		xid := ev.EventData
		if m.onXID != nil {
			m.onXID(uuid, xid)
		}
		if m.ignored[xid] {
			m.cfg.Metrics.event("xid", xid, "ignored")
			logger.V(2).Info("Ignored application XID", "gpu", m.names[uuid], "xid", xid)
			return
		}
		m.cfg.Metrics.event("xid", xid, "tainted")
		effect, what := classifyXID(xid)
		c := Condition{Key: KeyXID, Value: fmt.Sprint(xid), Effect: effect, Since: now,
			Message: fmt.Sprintf("XID %d: %s", xid, what), untilRecovered: effect == resourceapi.DeviceTaintEffectNoExecute}
		if giID, start, ok := migOf(ctx, parent, ev); ok {
			c.Message = migXIDMessage(xid, what, giID, ev)
			logger.Info("MIG-scoped XID", "gpu", m.names[uuid], "xid", xid, "gi", giID, "ci", ev.ComputeInstanceId, "placementStart", start)
			m.update(ctx, uuid, func(g *gpuState) bool { return g.setMIG(giID, start, c) })
			break
		}
		m.update(ctx, uuid, func(g *gpuState) bool { return g.set(c) })
	case nvml.EventTypeDoubleBitEccError:
		m.cfg.Metrics.event("ecc_double_bit", 0, "tainted")
		m.update(ctx, uuid, func(g *gpuState) bool { return g.set(eccCondition(now)) })
	default:
		logger.V(4).Info("NVML event not handled", "gpu", m.names[uuid], "type", ev.EventType)
		return
	}
	// Probe the GPU at once: whether it is lost and which recovery the
	// driver asks for is what later tells that it has been repaired.
	for _, g := range m.cfg.GPUs {
		if g.UUID == uuid {
			m.probe(ctx, g)
		}
	}
}

func eccCondition(now time.Time) Condition {
	return Condition{Key: KeyECC, Value: "double-bit", Effect: resourceapi.DeviceTaintEffectNoExecute, Since: now,
		Message: "uncorrectable (double-bit) ECC error", untilRecovered: true}
}

func (m *Monitor) setLost(ctx context.Context, uuid, value string) {
	c := lostCondition(value, m.cfg.now())
	m.update(ctx, uuid, func(g *gpuState) bool { return g.set(c) })
}

func lostCondition(value string, now time.Time) Condition {
	return Condition{Key: KeyLost, Value: value, Effect: resourceapi.DeviceTaintEffectNoExecute, Since: now,
		Message: "NVML cannot reach the GPU (" + value + ")"}
}

// timed runs an NVML call and records its latency.
func (m *Monitor) timed(call string, f func() nvml.Return) nvml.Return {
	start := time.Now()
	ret := f()
	m.cfg.Metrics.nvmlCall(call, time.Since(start))
	return ret
}

func metav1Time(t time.Time) metav1.Time { return metav1.NewTime(t.Truncate(time.Second)) }
