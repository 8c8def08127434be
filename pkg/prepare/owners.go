package prepare

import "sync"

// holder is one claim holding a device.
type holder struct {
	claimUID string
	claim    string // namespace/name, for messages
	access   access
}

// access is how a claim holds a device.
type access int

const (
	// exclusive: the whole device for this claim alone.
	exclusive access = iota
	// share: a consumable-capacity share (the allocation has a ShareID);
	// shares of one device coexist, an exclusive holder does not.
	share
	// admin: adminAccess, e.g. a monitoring agent; coexists with anything.
	admin
)

func compatible(a, b access) bool {
	return a == admin || b == admin || (a == share && b == share)
}

// owners indexes which claims hold which device on this node. It is rebuilt
// from the checkpoint at start-up and kept in step with it afterwards.
type owners struct {
	mu       sync.Mutex
	byDevice map[string][]holder
}

func newOwners() *owners { return &owners{byDevice: map[string][]holder{}} }

// conflict returns a holder of device other than claimUID that cannot coexist
// with h, if any.
func (o *owners) conflict(device string, h holder) (holder, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, other := range o.byDevice[device] {
		if other.claimUID == h.claimUID {
			continue
		}
		if !compatible(other.access, h.access) {
			return other, true
		}
	}
	return holder{}, false
}

func (o *owners) add(device string, h holder) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, other := range o.byDevice[device] {
		if other.claimUID == h.claimUID {
			return
		}
	}
	o.byDevice[device] = append(o.byDevice[device], h)
}

func (o *owners) release(claimUID string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for dev, hs := range o.byDevice {
		kept := hs[:0]
		for _, h := range hs {
			if h.claimUID != claimUID {
				kept = append(kept, h)
			}
		}
		if len(kept) == 0 {
			delete(o.byDevice, dev)
		} else {
			o.byDevice[dev] = kept
		}
	}
}

// holders returns the claim UIDs holding device (for tests and status).
func (o *owners) holders(device string) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var uids []string
	for _, h := range o.byDevice[device] {
		uids = append(uids, h.claimUID)
	}
	return uids
}

// claims counts the distinct claims holding any device.
func (o *owners) claims() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	seen := map[string]bool{}
	for _, hs := range o.byDevice {
		for _, h := range hs {
			seen[h.claimUID] = true
		}
	}
	return len(seen)
}

// devices counts the devices held by at least one claim.
func (o *owners) devices() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.byDevice)
}
