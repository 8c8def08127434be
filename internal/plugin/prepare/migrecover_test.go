package prepare

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/internal/plugin/checkpoint"
	"github.com/gpudra/gpudra/internal/plugin/mig"
)

// --mig-profiles only limits what is published: a claim prepared with a
// profile that the restarted plugin no longer publishes keeps its MIG device
// (or gets it back when it went missing), and is unprepared as usual.
func TestRecoverClaimOfUnpublishedProfile(t *testing.T) {
	for _, tc := range []struct {
		name     string
		lost     bool
		recreate int
	}{
		{"device kept", false, 0},
		{"missing device recreated", true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newMIGEnv(t, "dgx-h100", mig.ModeDynamic)
			m, _ := e.manager()
			c := gpuClaim("uid-c", "c", "gpu-0-mig-1g10gb-3")
			_, err := m.Prepare(ctx(t), c)
			require.NoError(t, err)
			before := e.instances(0)
			require.Len(t, before, 1)
			if tc.lost {
				require.NoError(t, e.mgr.Destroy(before[0]))
			}

			e.profiles = []string{"3g.40gb"} // the flag changed across the restart
			e.reopen()
			m, rep, err := e.tryManager()
			require.NoError(t, err, "recovery does not depend on what is published")
			require.Equal(t, 1, rep.Restored)
			require.Zero(t, rep.MIGDestroyed)
			require.Equal(t, tc.recreate, rep.MIGRecreated)
			after := e.instances(0)
			require.Len(t, after, 1)
			require.Equal(t, 3, after[0].Start)
			if !tc.lost {
				require.Equal(t, before, after, "the running container's MIG device is kept")
			}
			rec, err := m.cfg.Checkpoints.Get("uid-c")
			require.NoError(t, err)
			require.Equal(t, after[0].UUID, rec.Devices[0].UUID)

			require.NoError(t, m.Unprepare(ctx(t), ref(c)))
			require.Empty(t, e.instances(0), "unprepare destroys it")
		})
	}
}

// MIG devices of unpublished profiles that no claim accounts for are
// orphans like any other: the restart destroys them, so what the scheduler
// believes free (the whole GPU, placements over theirs) can be prepared.
func TestRecoverDestroysOrphansOfUnpublishedProfiles(t *testing.T) {
	e := newMIGEnv(t, "dgx-h100", mig.ModeDynamic)
	e.profiles = []string{"3g.40gb"}
	e.reopen()
	// Left by a plugin that published every profile, or made by hand.
	_, err := e.mgr.Create(e.node.GPUs[0].UUID, e.migProfile(0, "1g.10gb"), 0)
	require.NoError(t, err)
	_, err = e.mgr.Create(e.node.GPUs[1].UUID, e.migProfile(1, "2g.20gb"), 4)
	require.NoError(t, err)

	m, rep := e.restart()
	require.Equal(t, 2, rep.MIGDestroyed)
	require.Empty(t, e.instances(0))
	require.Empty(t, e.instances(1))
	_, err = m.Prepare(ctx(t), gpuClaim("uid-w", "w", "gpu-0"))
	require.NoError(t, err, "the whole GPU is free")
	_, err = m.Prepare(ctx(t), gpuClaim("uid-m", "m", "gpu-1-mig-3g40gb-4"))
	require.NoError(t, err, "the placement is free")
}

// A whole-GPU claim on a GPU that has a MIG device of an unpublished profile
// is a conflict (the placement is occupied), not an NVML failure to turn
// MIG mode off with the device still there.
func TestWholeGPUOverMIGDeviceOfUnpublishedProfile(t *testing.T) {
	e := newMIGEnv(t, "dgx-h100", mig.ModeDynamic)
	e.profiles = []string{"3g.40gb"}
	e.reopen()
	m, _ := e.manager()
	_, err := e.mgr.Create(e.node.GPUs[1].UUID, e.migProfile(1, "1g.10gb"), 6)
	require.NoError(t, err)
	_, err = m.Prepare(ctx(t), gpuClaim("uid-w", "w", "gpu-1"))
	require.ErrorIs(t, err, ErrConflict)
	require.ErrorIs(t, err, mig.ErrOccupied)
	require.Len(t, e.instances(1), 1)
}

// A crash after a claim's MIG devices were created and before
// PrepareCompleted leaves a record that names them, and the restart destroys
// exactly those: here the operator also switched the node to --mig=static,
// so no sweep of unaccounted devices runs and a device made by hand stays.
func TestMIGCrashAfterCreationDestroysExactlyTheCreated(t *testing.T) {
	e := newMIGEnv(t, "dgx-h100", mig.ModeDynamic)
	m, _ := e.manager()
	keep, err := e.mgr.Create(e.node.GPUs[0].UUID, e.migProfile(0, "3g.40gb"), 4)
	require.NoError(t, err)
	c := gpuClaim("uid-c", "c", "gpu-0-mig-2g20gb-0", "gpu-0-mig-1g10gb-2")
	crash(t, phaseMIGCreated, func() { _, _ = m.Prepare(ctx(t), c) })

	rec, err := m.cfg.Checkpoints.Get("uid-c")
	require.NoError(t, err)
	require.Equal(t, checkpoint.PrepareStarted, rec.State)
	byStart := map[int]mig.Instance{}
	for _, inst := range e.instances(0) {
		byStart[inst.Start] = inst
	}
	require.Len(t, byStart, 3)
	for _, d := range rec.Devices {
		inst := byStart[d.MIG.Start]
		require.Equal(t, inst.UUID, d.UUID, "device %s: the record names the created MIG device", d.Name)
		require.Equal(t, inst.GIID, d.MIG.GIID, d.Name)
		require.Equal(t, inst.CIID, d.MIG.CIID, d.Name)
	}

	e.mode = mig.ModeStatic
	_, rep := e.restart()
	require.Equal(t, 1, rep.RolledBack)
	require.Zero(t, rep.MIGDestroyed, "no sweep on a static MIG GPU")
	require.Equal(t, []mig.Instance{keep}, e.instances(0))
}

// During a rolling update the old process dies after creating a claim's MIG
// device; the kubelet retries on the new process, which recovered before
// the crash: the retry destroys the recorded device and prepares again.
func TestMIGCrashRetriedByTheOtherProcess(t *testing.T) {
	e := newMIGEnv(t, "dgx-h100", mig.ModeDynamic)
	oldProc, _ := e.manager()
	newProc, _ := e.manager()
	c := gpuClaim("uid-c", "c", "gpu-0-mig-1g20gb-2")
	crash(t, phaseMIGCreated, func() { _, _ = oldProc.Prepare(ctx(t), c) })
	orphan := e.instances(0)
	require.Len(t, orphan, 1)

	_, err := newProc.Prepare(ctx(t), c)
	require.NoError(t, err)
	insts := e.instances(0)
	require.Len(t, insts, 1)
	require.NotEqual(t, orphan[0].UUID, insts[0].UUID, "the orphan was destroyed and the device created again")
	rec, err := newProc.cfg.Checkpoints.Get("uid-c")
	require.NoError(t, err)
	require.Equal(t, checkpoint.PrepareCompleted, rec.State)
	require.Equal(t, insts[0].UUID, rec.Devices[0].UUID)
}

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
