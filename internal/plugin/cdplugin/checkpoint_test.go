package cdplugin

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpudra/gpudra/internal/plugin/computedomain"
)

var (
	channelC1 = computedomain.PreparedClaim{UID: "c1", Kind: computedomain.TypeChannel, DomainID: "u1", Ready: true}
	channelC2 = computedomain.PreparedClaim{UID: "c2", Kind: computedomain.TypeChannel, DomainID: "u1"}
	daemonD1  = computedomain.PreparedClaim{UID: "d1", Kind: computedomain.TypeDaemon, DomainID: "u1", Ready: true}
)

// oldCheckpoint is a checkpoint.json as the previous version wrote it
// (saveCheckpoint: all claims of node-a, sorted by UID).
const oldCheckpoint = `{"version":1,"node":"node-a","claims":[` +
	`{"UID":"c1","Kind":"channel","DomainID":"u1","Ready":true},{"UID":"d1","Kind":"daemon","DomainID":"u1","Ready":true}]}`

func TestRecords(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	r := records{dir: filepath.Join(t.TempDir(), recordsDir), node: "node-a"}
	got, err := r.load(ctx)
	require.NoError(t, err)
	require.Empty(t, got, "no directory: no claims")

	for _, c := range []computedomain.PreparedClaim{daemonD1, channelC2, channelC1} {
		require.NoError(t, r.put(c))
	}
	c2Ready := channelC2
	c2Ready.Ready = true
	require.NoError(t, r.put(c2Ready), "a claim's record is replaced")
	// A crashed write's temp file and files that are no record are skipped.
	require.NoError(t, os.WriteFile(filepath.Join(r.dir, ".c3.json.tmp-123"), []byte("half"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(r.dir, "notes.txt"), []byte("x"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(r.dir, "a_b.json"), []byte("x"), 0o600))
	got, err = r.load(ctx)
	require.NoError(t, err)
	require.Equal(t, []computedomain.PreparedClaim{channelC1, c2Ready, daemonD1}, got)
	fi, err := os.Stat(filepath.Join(r.dir, "c1.json"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	require.NoError(t, r.remove("c2"))
	require.NoError(t, r.remove("c2"), "a removed record is removed already")
	got, err = r.load(ctx)
	require.NoError(t, err)
	require.Equal(t, []computedomain.PreparedClaim{channelC1, daemonD1}, got)

	require.ErrorContains(t, r.put(computedomain.PreparedClaim{UID: "../x"}), "invalid claim UID", "a UID names no path")
	require.ErrorContains(t, r.remove("../x"), "invalid claim UID")
}

// A record the plugin cannot trust stops its start, with the file named
// and what to do.
func TestRecordRefused(t *testing.T) {
	for _, tc := range []struct {
		name, file, content, want string
	}{
		{"corrupt", "c1.json", `{"version":1,"node":"node-a","cla`, "is not a record of a prepared ComputeDomain claim"},
		{"another version", "c1.json", `{"version":2,"node":"node-a","claim":{"UID":"c1"}}`, "has format version 2, this plugin reads 1"},
		{"another node", "c1.json", `{"version":1,"node":"node-b","claim":{"UID":"c1"}}`, `records claims of node "node-b", not of this node "node-a"`},
		{"another claim", "c1.json", `{"version":1,"node":"node-a","claim":{"UID":"c2"}}`, `records claim "c2", not the claim "c1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancelCause(ctx)
			defer cancel(nil)
			e := newEnv(t)
			r := e.records()
			require.NoError(t, os.MkdirAll(r.dir, 0o700))
			path := filepath.Join(r.dir, tc.file)
			require.NoError(t, os.WriteFile(path, []byte(tc.content), 0o600))
			_, err := r.load(ctx)
			require.ErrorContains(t, err, path)
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, "remove it only if no pod on this node uses this claim")

			_, err = Start(ctx, e.o, e.client, e.dyn, cancel)
			require.ErrorContains(t, err, path, "the plugin does not start")
			require.ErrorContains(t, err, tc.want)
			require.FileExists(t, path, "the record is left for the operator")
		})
	}
}

// The previous version's checkpoint.json becomes one record per claim and
// then goes; a crash in between (both there) converts it again, keeping
// the records written since.
func TestMigrateCheckpoint(t *testing.T) {
	for _, tc := range []struct {
		name       string
		checkpoint string
		records    []computedomain.PreparedClaim
		want       []computedomain.PreparedClaim
		wantErr    string
	}{
		{name: "no checkpoint", records: []computedomain.PreparedClaim{channelC2}, want: []computedomain.PreparedClaim{channelC2}},
		{name: "checkpoint only", checkpoint: oldCheckpoint, want: []computedomain.PreparedClaim{channelC1, daemonD1}},
		{name: "empty checkpoint", checkpoint: `{"version":1,"node":"node-a","claims":[]}`},
		{name: "both: records first, then the old file", checkpoint: oldCheckpoint,
			records: []computedomain.PreparedClaim{channelC2, {UID: "c1", Kind: computedomain.TypeChannel, DomainID: "u1"}},
			want:    []computedomain.PreparedClaim{{UID: "c1", Kind: computedomain.TypeChannel, DomainID: "u1"}, channelC2, daemonD1}},
		{name: "another node", checkpoint: `{"version":1,"node":"node-b","claims":[]}`, wantErr: `records claims of node "node-b"`},
		{name: "another version", checkpoint: `{"version":7,"node":"node-a","claims":[]}`, wantErr: "has format version 7"},
		{name: "corrupt", checkpoint: `{"version":1,`, wantErr: "is not a checkpoint of ComputeDomain claims"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			dir := t.TempDir()
			r := records{dir: filepath.Join(dir, recordsDir), node: "node-a"}
			for _, c := range tc.records {
				require.NoError(t, r.put(c))
			}
			path := filepath.Join(dir, checkpointFile)
			if tc.checkpoint != "" {
				require.NoError(t, os.WriteFile(path, []byte(tc.checkpoint), 0o600))
			}
			err := r.migrateCheckpoint(ctx, path)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, path)
				require.ErrorContains(t, err, tc.wantErr)
				require.FileExists(t, path, "a checkpoint that is refused stays")
				return
			}
			require.NoError(t, err)
			require.NoFileExists(t, path)
			got, err := r.load(ctx)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// A node whose plugin the previous version ran: the plugin starts with
// the claims of its checkpoint.json, which is converted into records, and
// unpreparing one removes only its record.
func TestStartMigratesCheckpoint(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	e := newEnv(t)
	require.NoError(t, os.MkdirAll(e.o.PluginDataDir(), 0o750))
	path := filepath.Join(e.o.PluginDataDir(), checkpointFile)
	require.NoError(t, os.WriteFile(path, []byte(oldCheckpoint), 0o600))

	p := e.start(t, ctx, cancel)
	defer p.Stop()
	require.ElementsMatch(t, []computedomain.PreparedClaim{channelC1, daemonD1}, prepared(t, ctx, p.Node))
	require.NoFileExists(t, path)
	got, err := e.records().load(ctx)
	require.NoError(t, err)
	require.Equal(t, []computedomain.PreparedClaim{channelC1, daemonD1}, got)

	dra := e.dra(t)
	d1 := e.claim(t, ctx, "gpudra", "d1", "d1", "daemon", computedomain.DaemonDeviceName, names.DaemonConfigKind)
	unprepare(t, ctx, dra, d1)
	got, err = e.records().load(ctx)
	require.NoError(t, err)
	require.Equal(t, []computedomain.PreparedClaim{channelC1}, got)
	require.NoError(t, context.Cause(ctx))
}
