package prepare

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/internal/plugin/mig"
	"github.com/gpudra/gpudra/internal/plugin/sharing"
)

// repeatedPhrase returns a phrase of n words that occurs twice in msg
// (case-insensitive), or "" if none does: the mark of an error wrapped with
// the same context at two levels.
func repeatedPhrase(msg string, n int) string {
	words := strings.Fields(strings.ToLower(msg))
	seen := map[string]bool{}
	for i := 0; i+n <= len(words); i++ {
		p := strings.Join(words[i:i+n], " ")
		if seen[p] {
			return p
		}
		seen[p] = true
	}
	return ""
}

func TestRepeatedPhrase(t *testing.T) {
	require.Equal(t, "prepare claim default/b:", repeatedPhrase("x: prepare claim default/b: prepare claim default/b: boom", 3))
	require.Empty(t, repeatedPhrase("create MIG device a: create GPU instance b", 3))
}

// TestErrorsNameTheirContextOnce: an error as the user reads it — framed by
// the kubelet ("NodePrepareResources failed for ResourceClaim <name>: "),
// or as an event note — names the claim once and repeats no context: each
// level adds only what the level below did not say.
func TestErrorsNameTheirContextOnce(t *testing.T) {
	const kubelet = "NodePrepareResources failed for ResourceClaim "
	check := func(t *testing.T, claimName, msg string, unique ...string) {
		t.Helper()
		t.Log(msg)
		require.Empty(t, repeatedPhrase(msg, 4), "a phrase repeats in %q", msg)
		require.Equal(t, 1, strings.Count(msg, claimName), "the claim is named once in %q", msg)
		for _, u := range unique {
			require.Equal(t, 1, strings.Count(msg, u), "%q once in %q", u, msg)
		}
	}

	t.Run("conflict", func(t *testing.T) {
		e := newEnv(t, 1)
		m, _ := e.manager()
		_, err := m.Prepare(ctx(t), gpuClaim(uidA, "first", "gpu-0"))
		require.NoError(t, err)
		_, err = m.Prepare(ctx(t), gpuClaim(uidB, "second", "gpu-0"))
		require.ErrorIs(t, err, ErrConflict)
		check(t, "second", kubelet+"second: "+err.Error(), "default/first")
	})

	t.Run("MPS daemon gone and not started again", func(t *testing.T) {
		e := newEnv(t, 1)
		m, _ := e.manager()
		c := configured(uidA, "mps", []alloc{{request: "gpu", device: "gpu-0"}}, mpsConfig)
		_, err := m.Prepare(ctx(t), c)
		require.NoError(t, err)
		rec, err := m.cfg.Checkpoints.Get(uidA)
		require.NoError(t, err)
		require.NoError(t, syscall.Kill(rec.MPS.PID, syscall.SIGKILL))
		require.Eventually(t, func() bool { return !processAlive(rec.MPS.PID) }, 10*time.Second, 10*time.Millisecond)
		// A control tool that answers nothing and starts no daemon.
		m.cfg.MPS, err = sharing.NewMPSControl(sharing.MPSOptions{ControlPath: "/bin/false", Root: e.mpsRoot})
		require.NoError(t, err)

		_, err = m.Prepare(ctx(t), c)
		require.Error(t, err)
		check(t, "mps", kubelet+"mps: "+err.Error(), "does not answer", "could not be started")
		evs := e.takeMPSEvents()
		require.Len(t, evs, 1)
		require.Contains(t, evs[0].Reason, "does not answer")
		require.Error(t, evs[0].Err)
		// The event's parts are reported side by side (internal/plugin's note).
		check(t, "default/mps", evs[0].Claim+": "+evs[0].Reason+"; "+evs[0].Err.Error(), "does not answer")
	})

	t.Run("MIG placement occupied", func(t *testing.T) {
		e := newMIGEnv(t, "dgx-h100", mig.ModeDynamic)
		m, _ := e.manager()
		_, err := e.mgr.Create(e.node.GPUs[0].UUID, e.migProfile(0, "1g.10gb"), 4)
		require.NoError(t, err)
		_, err = m.Prepare(ctx(t), gpuClaim("uid-c", "c", "gpu-0-mig-1g10gb-4"))
		require.ErrorIs(t, err, ErrConflict)
		check(t, "c:", kubelet+"c: "+err.Error(), "1g.10gb", "slice 4")
	})

	t.Run("unprepare", func(t *testing.T) {
		e := newMIGEnv(t, "dgx-h100", mig.ModeDynamic)
		broken := &brokenMIG{Interface: e.srv, gpu: e.node.GPUs[1].UUID}
		e.mgr = mig.NewManager(broken)
		m, _ := e.manager()
		c := gpuClaim("uid-b", "b", "gpu-1-mig-1g10gb-3")
		_, err := m.Prepare(ctx(t), c)
		require.NoError(t, err)
		broken.set(true)
		err = m.Unprepare(ctx(t), ref(c))
		require.Error(t, err)
		check(t, "b:", "NodeUnprepareResources failed for ResourceClaim b: "+err.Error(), "gpu-1-mig-1g10gb-3")
	})
}
