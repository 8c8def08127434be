package telemetry

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/gpudra/gpudra/internal/plugin/checkpoint"
)

// CheckpointHolders answers Config.Held from the plugin's checkpoint: the
// holder index says which claims hold which device, and each claim's
// record its devices' UUIDs and MIG profiles. Both plugin instances of a
// rolling update write the same checkpoint, so either one labels the
// claims the other prepared. Records are read once per claim (a prepared
// claim's devices do not change) and forgotten when the claim is released.
type CheckpointHolders struct {
	Store *checkpoint.Store

	mu      sync.Mutex
	records map[string][]checkpoint.Device // completed claims, by UID
}

// Held implements Config.Held. Claims not (or no longer) completely
// prepared are left out; a claim whose record cannot be read is left out
// and named in the error, the others are returned.
func (c *CheckpointHolders) Held(_ context.Context) ([]Holding, error) {
	held, err := c.Store.HeldDevices()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.records == nil {
		c.records = map[string][]checkpoint.Device{}
	}
	live := map[string]bool{}
	var out []Holding
	var errs []error
	for device := range held {
		holders, err := c.Store.Holders(device)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, h := range holders {
			live[h.ClaimUID] = true
			devices, err := c.devices(h.ClaimUID)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for _, d := range devices {
				if d.Name != device {
					continue
				}
				hd := Holding{Device: Device{Name: d.Name, UUID: d.UUID}, Admin: d.AdminAccess,
					Claim: claimRef(h)}
				if d.MIG != nil {
					hd.Device.MIGProfile = d.MIG.Profile
				}
				out = append(out, hd)
			}
		}
	}
	for uid := range c.records {
		if !live[uid] {
			delete(c.records, uid)
		}
	}
	return out, errors.Join(errs...)
}

// devices returns the devices of a completely prepared claim (nil for a
// claim in the middle of a prepare or an unprepare).
func (c *CheckpointHolders) devices(uid string) ([]checkpoint.Device, error) {
	if d, ok := c.records[uid]; ok {
		return d, nil
	}
	rec, err := c.Store.Get(uid)
	if err != nil {
		return nil, fmt.Errorf("read checkpoint record of claim %s: %w", uid, err)
	}
	if rec == nil || rec.State != checkpoint.PrepareCompleted {
		return nil, nil // not cached: looked at again next time
	}
	c.records[uid] = rec.Devices
	return rec.Devices, nil
}

func claimRef(h checkpoint.Holder) ClaimRef {
	ns, name, _ := strings.Cut(h.Claim, "/")
	return ClaimRef{Namespace: ns, Name: name, UID: h.ClaimUID}
}
