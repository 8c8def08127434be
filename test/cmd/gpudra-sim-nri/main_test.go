package main

import (
	"testing"

	"github.com/containerd/nri/pkg/api"
)

func TestRestrictedOOMScoreAdj(t *testing.T) {
	zero, low := 0, -500
	for _, tc := range []struct {
		name    string
		score   *api.OptionalInt
		minimum *int
		want    *int
	}{
		{"not restricted", api.Int(-997), nil, nil},
		{"no score", nil, &zero, nil},
		{"critical pod raised", api.Int(-997), &zero, &zero},
		{"to the runtime's own", api.Int(-997), &low, &low},
		{"equal kept", api.Int(0), &zero, nil},
		{"best effort kept", api.Int(1000), &zero, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := restrictedOOMScoreAdj(tc.score, tc.minimum)
			if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
