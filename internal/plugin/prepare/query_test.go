package prepare

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/internal/plugin/checkpoint"
	"github.com/gpudra/gpudra/internal/plugin/mig"
)

// TestPreparedQueries: what claim status and events read — a completed
// claim and its devices, the claims holding a device, every claim holding
// one — follows prepare and unprepare, also through another Manager over
// the same node (a rolling update's other instance).
func TestPreparedQueries(t *testing.T) {
	e := newEnv(t, 3)
	m, _ := e.manager()
	q := m.Prepared()
	a := gpuClaim("uid-a", "a", "gpu-0")
	b := claim("uid-b", "b", []alloc{{request: "mon", device: "gpu-0", admin: true}, {request: "gpu", device: "gpu-1"}})
	s := shareClaim("uid-s000-0000-0000-000000000001", "s", "gpu-2", "10Gi", "")
	_, err := m.Prepare(ctx(t), a)
	require.NoError(t, err)
	_, err = m.Prepare(ctx(t), b)
	require.NoError(t, err)
	_, err = m.Prepare(ctx(t), s)
	require.NoError(t, err)
	// The same node's state as another instance reads it (its start-up
	// recovery runs before the prepare under way below begins).
	other, _ := e.manager()
	// A prepare under way (recorded, holding its device, not completed).
	st := m.cfg.Checkpoints
	require.NoError(t, st.PutVolatile(&checkpoint.ClaimRecord{UID: "uid-c", Namespace: "other", Name: "c", State: checkpoint.PrepareStarted,
		Devices: []checkpoint.Device{{Name: "gpu-1", AdminAccess: true}}}))
	require.NoError(t, st.AddHolder("gpu-1", checkpoint.Holder{ClaimUID: "uid-c", Claim: "other/c", Access: string(admin)}))
	// A holder without namespace/name is never written; it is left out.
	require.NoError(t, st.AddHolder("gpu-2", checkpoint.Holder{ClaimUID: "uid-x", Claim: "broken", Access: string(admin)}))

	refA := ClaimRef{Namespace: "default", Name: "a", UID: "uid-a"}
	refB := ClaimRef{Namespace: "default", Name: "b", UID: "uid-b"}
	refC := ClaimRef{Namespace: "other", Name: "c", UID: "uid-c"}
	refS := ClaimRef{Namespace: "default", Name: "s", UID: "uid-s000-0000-0000-000000000001"}
	gpu := func(i int) string { return e.node.GPUs[i].UUID }

	for name, q := range map[string]*Prepared{"this": q, "other instance": other.Prepared(), "store": NewPrepared(st)} {
		t.Run(name, func(t *testing.T) {
			tests := []struct {
				uid  string
				want *PreparedClaim
			}{
				{"uid-a", &PreparedClaim{ClaimRef: refA, Devices: []PreparedDevice{{Pool: testPool, Name: "gpu-0", UUID: gpu(0)}}}},
				{"uid-b", &PreparedClaim{ClaimRef: refB, Devices: []PreparedDevice{
					{Pool: testPool, Name: "gpu-0", UUID: gpu(0), AdminAccess: true}, {Pool: testPool, Name: "gpu-1", UUID: gpu(1)}}}},
				{refS.UID, &PreparedClaim{ClaimRef: refS, Devices: []PreparedDevice{
					{Pool: testPool, Name: "gpu-2", UUID: gpu(2), ShareID: "5e5e5e5e-0000-0000-0000-000000000001"}}}},
				{"uid-c", nil},       // mid-prepare
				{"uid-unknown", nil}, // never prepared
			}
			for _, tc := range tests {
				got, err := q.Claim(tc.uid)
				require.NoError(t, err)
				require.Equal(t, tc.want, got, tc.uid)
			}
			for device, want := range map[string][]ClaimRef{
				"gpu-0": {refA, refB}, "gpu-1": {refB, refC}, "gpu-2": {refS}, "gpu-3": {},
			} {
				got, err := q.Holding(device)
				require.NoError(t, err)
				require.Equal(t, want, got, device)
			}
			all, err := q.Claims()
			require.NoError(t, err)
			require.Equal(t, []ClaimRef{refA, refB, refS, refC}, all, "each once, sorted")
		})
	}

	require.NoError(t, m.Unprepare(ctx(t), ref(b)))
	got, err := q.Claim("uid-b")
	require.NoError(t, err)
	require.Nil(t, got, "unprepared")
	holding, err := q.Holding("gpu-0")
	require.NoError(t, err)
	require.Equal(t, []ClaimRef{refA}, holding)
	all, err := q.Claims()
	require.NoError(t, err)
	require.Equal(t, []ClaimRef{refA, refS, refC}, all)
	_, err = q.Holding("GPU 0")
	require.ErrorContains(t, err, "list the claims holding GPU 0: invalid device name")
}

// TestPreparedQueriesMIG: a MIG device is reported with its profile and
// the UUID of the instance created for the claim.
func TestPreparedQueriesMIG(t *testing.T) {
	e := newMIGEnv(t, "dgx-h100", mig.ModeDynamic)
	m, _ := e.manager()
	_, err := m.Prepare(ctx(t), gpuClaim("uid-a", "a", "gpu-0-mig-1g10gb-3"))
	require.NoError(t, err)
	got, err := m.Prepared().Claim("uid-a")
	require.NoError(t, err)
	insts := e.instances(0)
	require.Len(t, insts, 1)
	require.Equal(t, []PreparedDevice{{Pool: testPool, Name: "gpu-0-mig-1g10gb-3", UUID: insts[0].UUID, MIGProfile: "1g.10gb"}}, got.Devices)
	holding, err := m.Prepared().Holding("gpu-0-mig-1g10gb-3")
	require.NoError(t, err)
	require.Equal(t, []ClaimRef{{Namespace: "default", Name: "a", UID: "uid-a"}}, holding)
}
