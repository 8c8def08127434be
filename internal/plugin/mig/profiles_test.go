package mig

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gpudra/gpudra/internal/plugin/model"
)

func TestRestrictProfiles(t *testing.T) {
	geo := &model.MIGGeometry{MemorySlices: 8, ComputeSlices: 7, Profiles: []model.MIGProfile{
		{Name: "1g.10gb"}, {Name: "2g.20gb"}, {Name: "3g.40gb"}, {Name: "7g.80gb"},
	}}
	node := func() *model.Node {
		return &model.Node{GPUs: []model.GPU{
			{Minor: 0, MIG: geo, Partitioning: model.DynamicMIG},
			{Minor: 1, MIG: geo, Partitioning: model.StaticMIG},
			{Minor: 2, Partitioning: model.WholeGPU},
		}}
	}
	names := func(ps []model.MIGProfile) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Name)
		}
		return out
	}
	all := []string{"1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"}
	tests := []struct {
		name  string
		allow []string
		want  []string
	}{
		{"empty keeps all", nil, all},
		{"subset", []string{"3g.40gb", "1g.10gb"}, []string{"1g.10gb", "3g.40gb"}},
		{"unknown names are ignored", []string{"1g.5gb", "7g.80gb"}, []string{"7g.80gb"}},
		{"none known publishes no MIG device", []string{"1g.5gb"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := node()
			RestrictProfiles(context.Background(), n, tt.allow)
			assert.Equal(t, tt.want, names(n.GPUs[0].PublishedMIGProfiles()))
			assert.Equal(t, all, names(n.GPUs[0].MIG.Profiles), "the geometry keeps every profile: recovery and cleanup need them")
			assert.Same(t, geo, n.GPUs[0].MIG, "the shared geometry is neither copied nor modified")
			assert.Equal(t, all, names(geo.Profiles))
			assert.Empty(t, n.GPUs[1].UnpublishedMIGProfiles, "static MIG publishes the devices that exist")
		})
	}
}
