package computedomain

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/shared/imex"
)

const label = "resource.gpudra.io/computeDomain"

func channelClaim(t *testing.T, ns string, uid types.UID, device string, cfg imex.ClaimConfig) *resourceapi.ResourceClaim {
	return newClaim(ns, "claim-"+string(uid), uid,
		[]resourceapi.DeviceRequestAllocationResult{{Request: "channel", Driver: names.Driver, Pool: "node-a", Device: device}},
		[]resourceapi.DeviceAllocationConfiguration{{Source: resourceapi.AllocationConfigSourceClaim, Requests: []string{"channel"},
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver: names.Driver, Parameters: rawExtension(rawConfig(t, cfg))}}}})
}

func ready(name string) v1alpha1.ComputeDomainNode {
	return v1alpha1.ComputeDomainNode{Name: name, IPAddress: "10.0.0.1", CliqueID: "clique.1", Status: v1alpha1.DomainReady}
}

func otherClique(name string) v1alpha1.ComputeDomainNode {
	n := ready(name)
	n.CliqueID = "clique.2"
	return n
}

func noClique(name string) v1alpha1.ComputeDomainNode {
	n := ready(name)
	n.CliqueID = ""
	return n
}

// Prepares that stop before any channel device node is made: no root needed.
func TestPrepareChannelRefused(t *testing.T) {
	notReady := ready("node-a")
	notReady.Status = v1alpha1.DomainNotReady
	for _, tc := range []struct {
		name      string
		domain    *v1alpha1.ComputeDomain
		labels    map[string]string
		claimNS   string
		wantErr   string
		notReady  bool
		conflict  bool
		wantLabel string
	}{
		{name: "daemon not ready", domain: domain("team", "cd", "u1", notReady), claimNS: "team",
			wantErr: "(node node-a: NotReady): the node is labelled resource.gpudra.io/computeDomain=u1", notReady: true, wantLabel: "u1"},
		{name: "node not in the status yet", domain: domain("team", "cd", "u1", ready("node-b")), claimNS: "team",
			wantErr: "not in the domain's status yet", notReady: true, wantLabel: "u1"},
		{name: "no status at all, label already there", domain: domain("team", "cd", "u1"), labels: map[string]string{label: "u1"},
			claimNS: "team", wantErr: "is retried until the daemon is ready", notReady: true, wantLabel: "u1"},
		{name: "another namespace's domain", domain: domain("other", "cd", "u1", ready("node-a")), claimNS: "team",
			wantErr: "names ComputeDomain other/cd of another namespace"},
		{name: "node in another domain", domain: domain("team", "cd", "u1", ready("node-a")), labels: map[string]string{label: "u0"},
			claimNS: "team", wantErr: "node node-a already belongs to ComputeDomain u0", wantLabel: "u0"},
		{name: "domain gone", claimNS: "team", wantErr: "ComputeDomain with UID u1 not found"},
		// NVLink does not cross cliques: a node of clique 1 is refused
		// while the domain has a node of clique 2, even when it is ready
		// itself, and it keeps the label (its daemon is in the status).
		{name: "domain in another clique", domain: domain("team", "cd", "u1", otherClique("node-b"), ready("node-a")), claimNS: "team",
			wantErr: `node node-a is in clique "clique.1", the domain has node-b (clique "clique.2")`, conflict: true, wantLabel: "u1"},
		{name: "node without a clique in the domain", domain: domain("team", "cd", "u1", noClique("node-b")), claimNS: "team",
			wantErr: `node-b (clique "")`, conflict: true, wantLabel: "u1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cds := &domains{byUID: map[string]*v1alpha1.ComputeDomain{}}
			if tc.domain != nil {
				cds.byUID["u1"] = tc.domain
			}
			n, client := testNode(t, cds, nil, tc.labels)
			_, err := n.Prepare(context.Background(), channelClaim(t, tc.claimNS, "c1", "channel-0", channelCfg("u1", "")))
			require.ErrorContains(t, err, tc.wantErr)
			assert.Equal(t, tc.notReady, errors.Is(err, ErrDaemonNotReady), "retryable not-ready error: %v", err)
			assert.Equal(t, tc.conflict, errors.Is(err, ErrCliqueConflict), "clique conflict: %v", err)
			if tc.domain == nil {
				assert.True(t, apierrors.IsNotFound(err), "the not-found error is wrapped: %v", err)
			}
			assert.Equal(t, tc.wantLabel, nodeLabels(t, client)[label])
			held := prepared(t, n)
			if tc.notReady || tc.conflict {
				// It holds the label it set, not yet ready.
				assert.Equal(t, []PreparedClaim{{UID: "c1", Kind: TypeChannel, DomainID: "u1"}}, held)
			} else {
				assert.Empty(t, held)
			}
		})
	}
}

func TestPrepareChannels(t *testing.T) {
	roots := fakeRoot(t)
	channels, err := NewChannels(roots)
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		device string
		mode   string
		want   []int
	}{
		{name: "single: the allocated channel", device: "channel-0", want: []int{0}},
		{name: "single, another channel", device: "channel-2", mode: "Single", want: []int{2}},
		{name: "all: every channel of the node", device: "channel-0", mode: "All", want: []int{0, 1, 2, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cds := &domains{byUID: map[string]*v1alpha1.ComputeDomain{"u1": domain("team", "cd", "u1", ready("node-b"), ready("node-a"))}}
			n, client := testNode(t, cds, channels, map[string]string{"other": "x"})
			got, err := n.Prepare(context.Background(), channelClaim(t, "team", "c1", tc.device, channelCfg("u1", tc.mode)))
			require.NoError(t, err)
			require.Len(t, got, 1)
			assert.Equal(t, PreparedDevice{Requests: []string{"channel"}, Pool: "node-a", Device: tc.device, Edits: got[0].Edits}, got[0])
			var ids []int
			for _, d := range got[0].Edits.DeviceNodes {
				assert.Equal(t, ChannelPath(int(d.Minor)), d.Path)
				ids = append(ids, int(d.Minor))
			}
			assert.Equal(t, tc.want, ids)
			assert.Equal(t, map[string]string{"other": "x", label: "u1"}, nodeLabels(t, client))
			assert.Equal(t, []PreparedClaim{{UID: "c1", Kind: TypeChannel, DomainID: "u1", Ready: true}}, prepared(t, n))
		})
	}
}

// With ReadyWait, Prepare waits in-process for the daemon instead of
// failing, and reads the domain afresh while it waits.
func TestPrepareWaitsForTheDaemon(t *testing.T) {
	roots := fakeRoot(t)
	channels, err := NewChannels(roots)
	require.NoError(t, err)
	cds := &domains{byUID: map[string]*v1alpha1.ComputeDomain{"u1": domain("team", "cd", "u1")}}
	cds.onGet = func(d *domains) {
		if d.gets == 3 {
			d.byUID["u1"].Status.Nodes = []v1alpha1.ComputeDomainNode{ready("node-a")}
		}
	}
	n, _ := testNode(t, cds, channels, nil)
	n.cfg.ReadyWait, n.cfg.ReadyPoll = time.Minute, time.Millisecond
	_, err = n.Prepare(context.Background(), channelClaim(t, "team", "c1", "channel-0", channelCfg("u1", "")))
	require.NoError(t, err)
	assert.Equal(t, 3, cds.gets)

	// A wait that ends before the daemon is ready is the not-ready error.
	cds.onGet = nil
	cds.byUID["u2"] = domain("team", "cd2", "u2")
	n2, _ := testNode(t, cds, channels, nil)
	n2.cfg.ReadyWait, n2.cfg.ReadyPoll = 20*time.Millisecond, time.Millisecond
	_, err = n2.Prepare(context.Background(), channelClaim(t, "team", "c2", "channel-0", channelCfg("u2", "")))
	require.ErrorIs(t, err, ErrDaemonNotReady)
}

func TestUnprepareChannels(t *testing.T) {
	cds := &domains{byUID: map[string]*v1alpha1.ComputeDomain{"u1": domain("team", "cd", "u1")}}
	n, client := testNode(t, cds, nil, nil)
	ctx := context.Background()
	for _, uid := range []types.UID{"c1", "c2"} {
		_, err := n.Prepare(ctx, channelClaim(t, "team", uid, "channel-0", channelCfg("u1", "")))
		require.ErrorIs(t, err, ErrDaemonNotReady)
	}
	require.Equal(t, "u1", nodeLabels(t, client)[label])
	restore(t, n, PreparedClaim{UID: "d1", Kind: TypeDaemon, DomainID: "u1", Ready: true})

	require.NoError(t, n.Unprepare(ctx, "c1"))
	assert.Equal(t, "u1", nodeLabels(t, client)[label], "c2 still holds the node in the domain")
	require.NoError(t, n.Unprepare(ctx, "unknown"), "an unknown claim is unprepared already")
	require.NoError(t, n.Unprepare(ctx, "c2"))
	assert.NotContains(t, nodeLabels(t, client), label, "the daemon's claim does not hold the label")
	require.NoError(t, n.Unprepare(ctx, "c2"), "idempotent")
	assert.Equal(t, []PreparedClaim{{UID: "d1", Kind: TypeDaemon, DomainID: "u1", Ready: true}}, prepared(t, n))
}

// A label that names another domain by the time the last claim goes (set
// by hand) is not ours to remove.
func TestUnprepareKeepsAnotherDomainsLabel(t *testing.T) {
	n, client := testNode(t, &domains{}, nil, map[string]string{label: "u9"})
	restore(t, n, PreparedClaim{UID: "c1", Kind: TypeChannel, DomainID: "u1", Ready: true})
	require.NoError(t, n.Unprepare(context.Background(), "c1"))
	assert.Equal(t, "u9", nodeLabels(t, client)[label])
	assert.Empty(t, prepared(t, n))
}

func TestNewNodeChecksConfig(t *testing.T) {
	n, _ := testNode(t, &domains{}, nil, nil)
	good := n.cfg
	for _, tc := range []struct {
		name    string
		change  func(c *Config)
		wantErr string
	}{
		{"no node", func(c *Config) { c.NodeName = "" }, "--node-name"},
		{"no client", func(c *Config) { c.Client = nil }, "a Kubernetes client"},
		{"no names", func(c *Config) { c.Names.Label = "" }, "no driver name or node label"},
		{"no dir", func(c *Config) { c.DomainsDir = "" }, "no directory for the domains' node lists"},
		{"channels", func(c *Config) { c.ChannelCount = -2 }, "between 1 and"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.change(&c)
			_, err := NewNode(c)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

// Prepares and unprepares of one domain's claims racing each other: the
// node carries the label exactly while a claim holds it.
func TestLabelFollowsClaimsConcurrently(t *testing.T) {
	cds := &domains{byUID: map[string]*v1alpha1.ComputeDomain{"u1": domain("team", "cd", "u1")}}
	n, client := testNode(t, cds, nil, nil)
	ctx := context.Background()
	const claims = 8
	done := make(chan error, claims)
	for i := range claims {
		go func() {
			uid := types.UID(string(rune('a' + i)))
			_, err := n.Prepare(ctx, channelClaim(t, "team", uid, "channel-0", channelCfg("u1", "")))
			if !errors.Is(err, ErrDaemonNotReady) {
				done <- err
				return
			}
			if i%2 == 0 {
				err = n.Unprepare(ctx, uid)
			} else {
				err = nil
			}
			done <- err
		}()
	}
	for range claims {
		require.NoError(t, <-done)
	}
	assert.Len(t, prepared(t, n), claims/2)
	assert.Equal(t, "u1", nodeLabels(t, client)[label], "the odd claims still hold it")
	for _, c := range prepared(t, n) {
		require.NoError(t, n.Unprepare(ctx, c.UID))
	}
	assert.NotContains(t, nodeLabels(t, client), label)
}

// A claim unprepared while its prepare waits for the daemon is not
// reported prepared, and the label it set is gone.
func TestUnprepareDuringPrepare(t *testing.T) {
	cds := &domains{byUID: map[string]*v1alpha1.ComputeDomain{"u1": domain("team", "cd", "u1")}}
	n, client := testNode(t, cds, nil, nil)
	ctx := context.Background()
	cds.onGet = func(d *domains) {
		if d.gets == 2 {
			require.NoError(t, n.Unprepare(ctx, "c1"))
			d.byUID["u1"].Status.Nodes = []v1alpha1.ComputeDomainNode{ready("node-a")}
		}
	}
	n.cfg.ReadyWait, n.cfg.ReadyPoll = time.Minute, time.Millisecond
	_, err := n.Prepare(ctx, channelClaim(t, "team", "c1", "channel-0", channelCfg("u1", "")))
	require.ErrorContains(t, err, "was unprepared while it was being prepared")
	assert.Empty(t, prepared(t, n))
	assert.NotContains(t, nodeLabels(t, client), label)
}

// The store holds what Node holds of one claim: restored, prepared
// (labelled, waiting for the daemon), and gone after the unprepare.
func TestStoredClaim(t *testing.T) {
	cds := &domains{byUID: map[string]*v1alpha1.ComputeDomain{"u1": domain("team", "cd", "u1")}}
	n, _ := testNode(t, cds, nil, nil)
	ctx := context.Background()
	restore(t, n, PreparedClaim{UID: "d1", Kind: TypeDaemon, DomainID: "u1", Ready: true})
	_, err := n.Prepare(ctx, channelClaim(t, "team", "c1", "channel-0", channelCfg("u1", "")))
	require.ErrorIs(t, err, ErrDaemonNotReady)
	require.NoError(t, n.Unprepare(ctx, "d1"))
	for _, tc := range []struct {
		uid  types.UID
		want PreparedClaim
		ok   bool
	}{
		{uid: "c1", want: PreparedClaim{UID: "c1", Kind: TypeChannel, DomainID: "u1"}, ok: true},
		{uid: "d1"},
		{uid: "unknown"},
	} {
		got, ok, err := n.cfg.Store.Claim(ctx, tc.uid)
		require.NoError(t, err)
		assert.Equal(t, tc.ok, ok, tc.uid)
		assert.Equal(t, tc.want, got, tc.uid)
	}
}
