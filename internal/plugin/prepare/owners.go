package prepare

import (
	"slices"

	"github.com/gpudra/gpudra/internal/plugin/checkpoint"
)

// access is how a claim holds a device.
type access string

const (
	// exclusive: the whole device for this claim alone.
	exclusive access = "exclusive"
	// share: a consumable-capacity share (the allocation has a ShareID);
	// shares of one device coexist, an exclusive holder does not.
	share access = "share"
	// admin: adminAccess, e.g. a monitoring agent; coexists with anything.
	admin access = "admin"
)

func compatible(a, b access) bool {
	return a == admin || b == admin || (a == share && b == share)
}

// conflict returns a holder of device, other than claimUID, that cannot
// coexist with access a. The holders are on disk (see checkpoint.Holder), so
// claims prepared by another plugin process count too. The caller holds the
// device's lock.
func (m *Manager) conflict(device, claimUID string, a access) (checkpoint.Holder, bool, error) {
	holders, err := m.cfg.Checkpoints.Holders(device)
	if err != nil {
		return checkpoint.Holder{}, false, tag(errCheckpoint, err)
	}
	for _, h := range holders {
		if h.ClaimUID != claimUID && !compatible(access(h.Access), a) {
			return h, true, nil
		}
	}
	return checkpoint.Holder{}, false, nil
}

// otherHolder returns a holder of device other than claimUID, of any
// access (admin access included), from the on-disk index.
func (m *Manager) otherHolder(device, claimUID string) (checkpoint.Holder, bool, error) {
	holders, err := m.cfg.Checkpoints.Holders(device)
	if err != nil {
		return checkpoint.Holder{}, false, tag(errCheckpoint, err)
	}
	for _, h := range holders {
		if h.ClaimUID != claimUID {
			return h, true, nil
		}
	}
	return checkpoint.Holder{}, false, nil
}

// hold records that the claim of rec holds its devices. The caller holds the
// devices' locks, and rec is already in the checkpoint. Devices held with
// the same access share one holder file (checkpoint.Store.AddHolders).
func (m *Manager) hold(rec *checkpoint.ClaimRecord) error {
	byAccess := map[access][]string{}
	var order []access
	for _, d := range rec.Devices {
		a := accessOf(d)
		if _, seen := byAccess[a]; !seen {
			order = append(order, a)
		}
		byAccess[a] = append(byAccess[a], d.Name)
	}
	for _, a := range order {
		h := checkpoint.Holder{ClaimUID: rec.UID, Claim: rec.Namespace + "/" + rec.Name, Access: string(a)}
		if err := m.cfg.Checkpoints.AddHolders(h, byAccess[a]...); err != nil {
			return tag(errCheckpoint, err)
		}
	}
	return nil
}

// dropHoldersOutside removes the claim's holders on devices of rec that are
// not in keep.
func (m *Manager) dropHoldersOutside(rec *checkpoint.ClaimRecord, keep []string) error {
	for _, d := range rec.Devices {
		if !slices.Contains(keep, d.Name) {
			if err := m.cfg.Checkpoints.RemoveHolder(d.Name, rec.UID); err != nil {
				return tag(errCheckpoint, err)
			}
		}
	}
	return nil
}
