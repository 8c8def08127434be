package mig

import (
	"context"
	"maps"
	"slices"
	"strings"

	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/model"
)

// RestrictProfiles limits the MIG profiles that dynamically partitioned
// GPUs publish (--mig-profiles) to names, e.g. ["1g.10gb", "3g.40gb"]; empty
// keeps every profile. Each published placement is a device in the
// ResourceSlice, and the scheduler's allocator examines every device of a
// node for every claim it places there, so publishing only the profiles a
// cluster uses makes scheduling on dynamic-MIG nodes proportionally cheaper
// (docs/design/scheduler-scale.md). Only publication changes: the GPU's geometry keeps
// every profile, so its counters are unchanged (what is published can never
// over-allocate a GPU) and recovery, cleanup and MIG mode changes see MIG
// devices of every profile, also those of claims prepared before the flag
// changed. A name no GPU of the node knows is logged, not fatal: one
// DaemonSet flag serves nodes of different GPU models.
func RestrictProfiles(ctx context.Context, node *model.Node, names []string) {
	if len(names) == 0 {
		return
	}
	logger := klog.FromContext(ctx)
	known := map[string]bool{}
	for i := range node.GPUs {
		g := &node.GPUs[i]
		if g.Partitioning != model.DynamicMIG || g.MIG == nil {
			continue
		}
		g.UnpublishedMIGProfiles = nil
		for _, p := range g.MIG.Profiles {
			known[p.Name] = true
			if !slices.Contains(names, p.Name) {
				g.UnpublishedMIGProfiles = append(g.UnpublishedMIGProfiles, p.Name)
			}
		}
	}
	if len(known) == 0 {
		return
	}
	var unknown []string
	for _, n := range names {
		if !known[n] {
			unknown = append(unknown, n)
		}
	}
	if len(unknown) > 0 {
		all := slices.Sorted(maps.Keys(known))
		logger.Info("Some --mig-profiles are not MIG profiles of this node's GPUs; they are ignored here",
			"unknown", strings.Join(unknown, ","), "known", strings.Join(all, ","))
	}
}
