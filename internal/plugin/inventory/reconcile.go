package inventory

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/gpudra/gpudra/internal/plugin/model"
)

// Reconcile decides, for every GPU of node.Unavailable, whether it is
// published from its last known entry in known:
//
//   - the entry is the one with the PCI bus ID NVML still reported for the
//     GPU, or else the one with its NVML index;
//   - it is not used when NVML reported another UUID, or when a GPU that
//     answered (or another restored one) has its UUID, PCI bus ID or device
//     name: then the entry describes some other GPU (indexes shift when a
//     GPU disappears from the bus altogether);
//   - a GPU without a usable entry is withheld.
//
// A published GPU is appended to node.GPUs (kept in index order) with its
// current index and Unreachable set to its reason; the entry's
// PublishedAs or Withheld says which. Reconcile returns what the inventory
// should hold from now on: the GPUs that answered and the restored ones.
// Entries of GPUs NVML no longer counts at all are forgotten.
func Reconcile(node *model.Node, known []model.GPU) []model.GPU {
	taken := map[string]bool{}
	take := func(g *model.GPU) {
		taken["uuid/"+g.UUID] = true
		taken["pci/"+g.PCIBusID] = true
		taken["name/"+g.DeviceName()] = true
	}
	for i := range node.GPUs {
		take(&node.GPUs[i])
	}
	remember := slices.Clone(node.GPUs)
	var restored []model.GPU
	for i := range node.Unavailable {
		u := &node.Unavailable[i]
		entry, why := lastKnown(u, known)
		switch {
		case entry == nil:
		case taken["uuid/"+entry.UUID] || taken["pci/"+entry.PCIBusID] || taken["name/"+entry.DeviceName()]:
			entry, why = nil, fmt.Sprintf("its last known identity (%s, %s at %s) now belongs to a GPU that answers",
				entry.DeviceName(), entry.UUID, entry.PCIBusID)
		}
		if entry == nil {
			u.Withheld = why
			continue
		}
		g := *entry
		g.Index = u.Index
		take(&g)
		remember = append(remember, g)
		g.Unreachable = u.Reason
		restored = append(restored, g)
		u.PublishedAs = g.DeviceName()
		if u.UUID == "" {
			u.UUID = g.UUID
		}
		if u.PCIBusID == "" {
			u.PCIBusID = g.PCIBusID
		}
	}
	node.GPUs = append(node.GPUs, restored...)
	byIndex := func(a, b model.GPU) int { return cmp.Compare(a.Index, b.Index) }
	slices.SortStableFunc(node.GPUs, byIndex)
	slices.SortStableFunc(remember, byIndex)
	return remember
}

// lastKnown finds the entry of an unavailable GPU, or says why there is none.
func lastKnown(u *model.UnavailableGPU, known []model.GPU) (*model.GPU, string) {
	var entry *model.GPU
	for i := range known {
		if (u.PCIBusID != "" && known[i].PCIBusID == u.PCIBusID) || (u.PCIBusID == "" && known[i].Index == u.Index) {
			entry = &known[i]
			break
		}
	}
	switch {
	case entry == nil && u.PCIBusID != "":
		return nil, "no GPU was known at PCI bus ID " + u.PCIBusID + " (never seen by this plugin)"
	case entry == nil:
		return nil, fmt.Sprintf("no GPU was known at NVML index %d (never seen by this plugin)", u.Index)
	case u.UUID != "" && u.UUID != entry.UUID:
		return nil, fmt.Sprintf("NVML reports UUID %s, the GPU last known there was %s", u.UUID, entry.UUID)
	}
	return entry, ""
}
