package prepare

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/pkg/mig"
)

// NVML hands a free GPU instance ID to the next instance: if a claim's MIG
// device is destroyed behind the plugin's back and another one takes its
// ID, unpreparing the claim must not destroy the newcomer.
func TestUnprepareLeavesAMIGDeviceThatReusedTheID(t *testing.T) {
	e := newMIGEnv(t, "dgx-h100", mig.ModeDynamic)
	m, _ := e.manager()
	c := gpuClaim("uid-c", "c", "gpu-0-mig-2g20gb-2")
	_, err := m.Prepare(ctx(t), c)
	require.NoError(t, err)
	ours := e.instances(0)[0]
	require.NoError(t, e.mgr.Destroy(ours))
	for _, name := range []string{"1g.20gb", "2g.20gb"} { // another profile, then the same one
		t.Run(name, func(t *testing.T) {
			other, err := e.mgr.Create(ours.ParentUUID, e.migProfile(0, name), ours.Start)
			require.NoError(t, err)
			require.Equal(t, ours.GIID, other.GIID, "precondition: the ID is reused")
			require.NoError(t, m.Unprepare(ctx(t), ref(c)), "the claim's device is gone: unprepared")
			require.Equal(t, []mig.Instance{other}, e.instances(0), "the other device is left alone")
			require.NoError(t, e.mgr.Destroy(other))
			_, err = m.Prepare(ctx(t), c)
			require.NoError(t, err)
			ours = e.instances(0)[0]
			require.NoError(t, e.mgr.Destroy(ours))
		})
	}
}
