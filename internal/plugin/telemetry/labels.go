package telemetry

import (
	"context"
	"slices"

	"github.com/gpudra/gpudra/internal/shared/telemetry/names"
)

// Label names of the device series, in order.
var deviceLabels = names.DeviceLabels

// series is one labelled device reading.
type series struct {
	// labels are the values of deviceLabels after "node".
	labels  []string
	reading reading
}

// snapshot is one sample of every device.
type snapshot struct{ series []series }

// labelSets returns the label values (after node) of the series of device
// d: one per pod of each claim holding it (one with empty pod labels for a
// claim whose pods are unknown), or a single one with empty claim and pod
// labels while no claim holds it. Claims with admin access never label a
// device: they watch it, the workload is someone else's.
func labelSets(ctx context.Context, d Device, holdings []Holding, pods PodSource) [][]string {
	base := []string{d.Name, d.UUID, d.MIGProfile}
	var out [][]string
	add := func(claim ClaimRef, pod string) {
		podNS := ""
		if pod != "" {
			podNS = claim.Namespace
		}
		set := append(slices.Clone(base), claim.Namespace, claim.Name, podNS, pod)
		if !slices.ContainsFunc(out, func(o []string) bool { return slices.Equal(o, set) }) {
			out = append(out, set)
		}
	}
	for _, h := range holdings {
		if h.Device.Name != d.Name || h.Admin {
			continue
		}
		var names []string
		if pods != nil {
			names = pods.Pods(ctx, h.Claim)
		}
		if len(names) == 0 {
			add(h.Claim, "")
		}
		for _, p := range names {
			add(h.Claim, p)
		}
	}
	if len(out) == 0 {
		add(ClaimRef{}, "")
	}
	return out
}
