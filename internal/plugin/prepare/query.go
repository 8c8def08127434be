package prepare

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gpudra/gpudra/internal/plugin/checkpoint"
)

// Prepared answers what the rest of the plugin (claim status, events) asks
// about the claims prepared on the node. It reads the state the prepare
// state machine keeps on disk — every plugin process of the node, two
// during a rolling update, sees the same — and changes nothing; how that
// state is kept (records, the holder index) stays this package's business.
// An answer is a snapshot: a claim may be prepared or unprepared right after.
type Prepared struct {
	store *checkpoint.Store
}

// NewPrepared queries the state kept in store.
func NewPrepared(store *checkpoint.Store) *Prepared { return &Prepared{store: store} }

// Prepared queries the manager's state.
func (m *Manager) Prepared() *Prepared { return NewPrepared(m.cfg.Checkpoints) }

// ClaimRef names a claim.
type ClaimRef struct {
	Namespace, Name, UID string
}

func (r ClaimRef) String() string { return r.Namespace + "/" + r.Name }

// PreparedClaim is a claim whose prepare has completed, and its devices.
type PreparedClaim struct {
	ClaimRef
	Devices []PreparedDevice
}

// PreparedDevice is one device of a prepared claim.
type PreparedDevice struct {
	// Pool and Name are the device's pool and name in the ResourceSlice.
	Pool, Name string
	// UUID is the GPU's, or the MIG device's.
	UUID string
	// ShareID is set for a consumable-capacity share.
	ShareID string
	// MIGProfile is set for a MIG device, e.g. "1g.10gb".
	MIGProfile string
	// AdminAccess is set for an allocation with admin access.
	AdminAccess bool
}

// Claim returns the claim with this UID if its prepare has completed; nil
// if it has not (never prepared, already unprepared, or in the middle of a
// prepare or unprepare).
func (p *Prepared) Claim(uid string) (*PreparedClaim, error) {
	rec, err := p.store.Get(uid)
	if err != nil || rec == nil || rec.State != checkpoint.PrepareCompleted {
		return nil, err
	}
	c := &PreparedClaim{ClaimRef: ClaimRef{Namespace: rec.Namespace, Name: rec.Name, UID: rec.UID},
		Devices: make([]PreparedDevice, 0, len(rec.Devices))}
	for _, d := range rec.Devices {
		pd := PreparedDevice{Pool: d.Pool, Name: d.Name, UUID: d.UUID, ShareID: d.ShareID, AdminAccess: d.AdminAccess}
		if d.MIG != nil {
			pd.MIGProfile = d.MIG.Profile
		}
		c.Devices = append(c.Devices, pd)
	}
	return c, nil
}

// Holding lists the claims that hold a device: prepared with it, or being
// prepared or unprepared with it right now. They are sorted by namespace,
// name and UID.
func (p *Prepared) Holding(device string) ([]ClaimRef, error) {
	holders, err := p.store.Holders(device)
	if err != nil {
		return nil, fmt.Errorf("list the claims holding %s: %w", device, err)
	}
	out := make([]ClaimRef, 0, len(holders))
	for _, h := range holders {
		if r, ok := refOf(h); ok {
			out = append(out, r)
		}
	}
	sortRefs(out)
	return out, nil
}

// Claims lists every claim that holds a device of the node (see Holding),
// each once, sorted by namespace, name and UID. The holders of a device that
// cannot be read are left out and named in the error; the others are
// returned.
func (p *Prepared) Claims() ([]ClaimRef, error) {
	held, err := p.store.HeldDevices()
	if err != nil {
		return nil, fmt.Errorf("list the claims holding devices: %w", err)
	}
	seen := map[string]bool{}
	var out []ClaimRef
	var errs []error
	for device := range held {
		refs, err := p.Holding(device)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, r := range refs {
			if !seen[r.UID] {
				seen[r.UID] = true
				out = append(out, r)
			}
		}
	}
	sortRefs(out)
	return out, errors.Join(errs...)
}

// refOf names a holder's claim; a holder without "namespace/name" (which
// this package never writes) is left out.
func refOf(h checkpoint.Holder) (ClaimRef, bool) {
	ns, name, ok := strings.Cut(h.Claim, "/")
	return ClaimRef{Namespace: ns, Name: name, UID: h.ClaimUID}, ok && ns != "" && name != ""
}

func sortRefs(refs []ClaimRef) {
	slices.SortFunc(refs, func(a, b ClaimRef) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.UID, b.UID))
	})
}
