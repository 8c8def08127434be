package gpuverify

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/internal/plugin/health"
	"github.com/gpudra/gpudra/internal/plugin/model"
)

// HealthResult is what the health step saw.
type HealthResult struct {
	Watch string `json:"watch"`
	// Registered are the GPUs registered for NVML events.
	Registered []string `json:"registered"`
	Events     []Event  `json:"events"`
	Before     []Probe  `json:"probesBefore"`
	After      []Probe  `json:"probesAfter"`
	// Conditions are the health monitor's findings at the end, by GPU.
	Conditions map[string][]string `json:"conditions,omitempty"`
}

// Event is one NVML event received during the watch.
type Event struct {
	GPU  string    `json:"gpu"`
	Type string    `json:"type"`
	Data uint64    `json:"data"`
	At   time.Time `json:"at"`
	// Ignored: an XID the plugin ignores (caused by applications).
	Ignored bool `json:"ignored"`
}

// watchedEvents are the events the plugin's health monitor handles.
const watchedEvents = nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError

// health is step 4: the plugin's health monitor (event set and probes) runs
// for the watch time next to an event set of the kit's own, which records
// every event for the report. A healthy machine shows no finding.
func (k *kit) health(ctx context.Context, node *model.Node) {
	s := k.r.section(fmt.Sprintf("4. GPU health: NVML events and probes for %s", k.cfg.Watch))
	res := &HealthResult{Watch: k.cfg.Watch.String()}
	k.r.Health = res
	var gpus []health.GPU
	for _, g := range node.GPUs {
		dev, ret := k.lib.DeviceGetHandleByUUID(g.UUID)
		if ret != nvml.SUCCESS {
			s.fail("%s: NVML handle by UUID %s: %v", g.DeviceName(), g.UUID, ret)
			continue
		}
		gpus = append(gpus, health.GPU{UUID: g.UUID, Name: g.DeviceName(), Device: dev})
	}
	res.Before = probeAll(s, gpus, "before")
	set, ret := k.lib.EventSetCreate()
	haveSet := ret == nvml.SUCCESS
	if haveSet {
		defer func() { _ = set.Free() }()
		res.Registered = register(s, set, gpus)
	} else {
		s.fail("create an NVML event set: %v (the plugin would watch GPU health by probing only)", ret)
	}

	mon := health.New(health.Config{Lib: k.lib, GPUs: gpus, ProbeInterval: k.cfg.ProbeInterval})
	wctx, cancel := context.WithTimeout(ctx, k.cfg.Watch)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { mon.Run(wctx) })
	if k.cfg.WatchStarted != nil {
		k.cfg.WatchStarted()
	}
	if haveSet {
		res.Events = collectEvents(wctx, set, gpus)
	} else {
		<-wctx.Done()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		s.fail("the watch was interrupted after less than %s: %v", k.cfg.Watch, err)
	}
	reportEvents(s, res.Events)
	res.After = probeAll(s, gpus, "after")
	compareECC(s, res.Before, res.After)
	snap := mon.Snapshot()
	for _, g := range gpus {
		conds := snap.Conditions(g.UUID)
		if len(conds) == 0 {
			continue
		}
		if res.Conditions == nil {
			res.Conditions = map[string][]string{}
		}
		for _, c := range conds {
			res.Conditions[g.Name] = append(res.Conditions[g.Name], fmt.Sprintf("%s=%s:%s (%s)", c.Key, c.Value, c.Effect, c.Message))
		}
		s.fail("health monitor: %s is %s: %s", g.Name, snap.Health(g.UUID), snap.Message(g.UUID))
	}
	if len(res.Conditions) == 0 {
		s.pass("health monitor: all %d GPU(s) healthy after the watch (no XID, ECC, lost-GPU or recovery-action finding)", len(gpus))
	}
}

// register registers every GPU that supports them for the watched events.
func register(s *Section, set nvml.EventSet, gpus []health.GPU) []string {
	var registered []string
	for _, g := range gpus {
		supported, ret := g.Device.GetSupportedEventTypes()
		switch {
		case ret == nvml.ERROR_NOT_SUPPORTED || (ret == nvml.SUCCESS && supported&watchedEvents == 0):
			s.info("%s: no XID/ECC event support; the plugin watches it by probing only", g.Name)
			continue
		case ret != nvml.SUCCESS:
			s.fail("%s: supported NVML event types: %v", g.Name, ret)
			continue
		}
		if ret := g.Device.RegisterEvents(supported&watchedEvents, set); ret != nvml.SUCCESS {
			hint := ""
			if ret == nvml.ERROR_NO_PERMISSION {
				hint = " (run the kit as root, as the plugin runs privileged)"
			}
			s.fail("%s: register for NVML events: %v%s", g.Name, ret, hint)
			continue
		}
		registered = append(registered, g.Name)
	}
	if len(registered) > 0 {
		s.pass("registered %d GPU(s) for critical XID and double-bit ECC events", len(registered))
	}
	return registered
}

func collectEvents(ctx context.Context, set nvml.EventSet, gpus []health.GPU) []Event {
	var events []Event
	for ctx.Err() == nil {
		wait := uint32(500)
		if d, ok := ctx.Deadline(); ok {
			wait = uint32(min(max(time.Until(d).Milliseconds(), 1), 500))
		}
		data, ret := set.Wait(wait)
		if ret != nvml.SUCCESS {
			if ret != nvml.ERROR_TIMEOUT {
				time.Sleep(100 * time.Millisecond) // no busy loop on a broken set
			}
			continue
		}
		ev := Event{GPU: gpuName(gpus, data.Device), Data: data.EventData, At: time.Now()}
		switch data.EventType {
		case nvml.EventTypeXidCriticalError:
			ev.Type = "xid"
			ev.Ignored = slices.Contains(health.DefaultIgnoredXIDs, data.EventData)
		case nvml.EventTypeDoubleBitEccError:
			ev.Type = "double-bit-ecc"
		default:
			ev.Type = fmt.Sprintf("0x%x", data.EventType)
		}
		events = append(events, ev)
	}
	return events
}

func gpuName(gpus []health.GPU, dev nvml.Device) string {
	for _, g := range gpus {
		if g.Device == dev {
			return g.Name
		}
	}
	if dev != nil {
		if id, ret := dev.GetUUID(); ret == nvml.SUCCESS {
			for _, g := range gpus {
				if g.UUID == id {
					return g.Name
				}
			}
			return id
		}
	}
	return "unknown GPU"
}

func reportEvents(s *Section, events []Event) {
	bad := 0
	for _, ev := range events {
		switch {
		case ev.Ignored:
			s.info("event: %s XID %d at %s (an application XID the plugin ignores)", ev.GPU, ev.Data, ev.At.Format(time.TimeOnly))
		case ev.Type == "xid":
			bad++
			s.fail("event: %s critical XID %d at %s", ev.GPU, ev.Data, ev.At.Format(time.TimeOnly))
		default:
			bad++
			s.fail("event: %s %s (data %d) at %s", ev.GPU, ev.Type, ev.Data, ev.At.Format(time.TimeOnly))
		}
	}
	if bad == 0 {
		s.pass("no critical NVML event during the watch (%d event(s) in all)", len(events))
	}
}
