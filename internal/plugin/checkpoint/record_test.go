package checkpoint

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMPSDaemonsRoundTrip: SetMPSDaemons writes a claim's daemons where
// MPSDaemons reads them (group 0 in MPS, as records before daemons per
// group have it; the others in MPSGroups), and none clears both.
func TestMPSDaemonsRoundTrip(t *testing.T) {
	tests := []struct {
		name       string
		daemons    []MPSDaemon
		wantGroups int // len(MPSGroups)
	}{
		{name: "none"},
		{name: "one", daemons: []MPSDaemon{{Dir: "/mps/a"}}},
		{name: "three", daemons: []MPSDaemon{{Dir: "/mps/a"}, {Group: 1, Dir: "/mps/a/group-1"}, {Group: 2, Dir: "/mps/a/group-2"}}, wantGroups: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &ClaimRecord{MPS: &MPSDaemon{Dir: "stale"}, MPSGroups: []MPSDaemon{{Group: 1, Dir: "stale"}}}
			r.SetMPSDaemons(tc.daemons)
			require.Len(t, r.MPSGroups, tc.wantGroups)
			var got []MPSDaemon
			for _, d := range r.MPSDaemons() {
				got = append(got, *d)
			}
			require.Equal(t, tc.daemons, got)
			if len(tc.daemons) > 0 {
				require.Equal(t, tc.daemons[0], *r.MPS, "group 0 is in MPS")
			} else {
				require.Nil(t, r.MPS)
			}
		})
	}
}
