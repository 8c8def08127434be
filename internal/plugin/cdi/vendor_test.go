package cdi

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A writer for another vendor names it in the spec's kind, file and device
// IDs, and two vendors sharing one directory never see each other's specs.
func TestVendorWriter(t *testing.T) {
	edits, err := NewCachedEdits(SimulatedEdits{}, gpus)
	require.NoError(t, err)
	dir := t.TempDir()
	native, err := NewWriter(dir, edits)
	require.NoError(t, err)
	nv, err := NewVendorWriter(dir, "k8s.gpu.nvidia.com", edits)
	require.NoError(t, err)

	dev := []ClaimDevice{{DeviceName: "gpu-0", GPU: &gpus[0], RequestUUIDs: []string{gpus[0].UUID}}}
	ids, err := nv.WriteClaim(uid, dev)
	require.NoError(t, err)
	require.Equal(t, "k8s.gpu.nvidia.com/claim="+uid+"-gpu-0", ids["gpu-0"])
	data, err := os.ReadFile(filepath.Join(dir, "k8s.gpu.nvidia.com-claim_"+uid+".json"))
	require.NoError(t, err)
	require.Contains(t, string(data), `"kind":"k8s.gpu.nvidia.com/claim"`)
	inject(t, dir, ids["gpu-0"])

	got, err := native.ListClaims()
	require.NoError(t, err)
	require.Empty(t, got, "the native writer must not list the other vendor's spec")
	got, err = nv.ListClaims()
	require.NoError(t, err)
	require.Equal(t, []string{uid}, got)
	require.NoError(t, nv.RemoveClaim(uid))
	has, err := nv.HasClaim(uid)
	require.NoError(t, err)
	require.False(t, has)
}

// NVIDIA's driver writes its claim specs as YAML under the same name
// (k8s.gpu.nvidia.com-claim_<uid>.yaml). After a migration the compatibility
// mode lists them like its own, removes them with a claim, and replaces one
// when it prepares the same claim, so that no stale device of the same name
// is left for the runtime.
func TestVendorWriterNVIDIALeftoverYAML(t *testing.T) {
	edits, err := NewCachedEdits(SimulatedEdits{}, gpus)
	require.NoError(t, err)
	other := "11111111-2222-3333-4444-555555555555"
	leftover := func(dir, u string) string {
		p := filepath.Join(dir, "k8s.gpu.nvidia.com-claim_"+u+".yaml")
		require.NoError(t, os.WriteFile(p, []byte("cdiVersion: 0.5.0\nkind: k8s.gpu.nvidia.com/claim\ndevices: []\n"), 0o600))
		return p
	}
	tests := []struct {
		name string
		run  func(t *testing.T, nv *Writer, dir string)
	}{
		{name: "listed beside our own specs, each claim once", run: func(t *testing.T, nv *Writer, dir string) {
			leftover(dir, uid)
			leftover(dir, other)
			_, err := nv.WriteClaim(other, []ClaimDevice{{DeviceName: "gpu-0", GPU: &gpus[0]}})
			require.NoError(t, err)
			got, err := nv.ListClaims()
			require.NoError(t, err)
			require.Equal(t, []string{other, uid}, got)
		}},
		{name: "removed with the claim", run: func(t *testing.T, nv *Writer, dir string) {
			p := leftover(dir, uid)
			require.NoError(t, nv.RemoveClaim(uid))
			require.NoFileExists(t, p)
			got, err := nv.ListClaims()
			require.NoError(t, err)
			require.Empty(t, got)
		}},
		{name: "replaced when the claim is prepared again", run: func(t *testing.T, nv *Writer, dir string) {
			p := leftover(dir, uid)
			ids, err := nv.WriteClaim(uid, []ClaimDevice{{DeviceName: "gpu-0", GPU: &gpus[0]}})
			require.NoError(t, err)
			require.NoFileExists(t, p)
			inject(t, dir, ids["gpu-0"])
		}},
		{name: "the native writer ignores them", run: func(t *testing.T, _ *Writer, dir string) {
			p := leftover(dir, uid)
			native, err := NewWriter(dir, edits)
			require.NoError(t, err)
			got, err := native.ListClaims()
			require.NoError(t, err)
			require.Empty(t, got)
			require.NoError(t, native.RemoveClaim(uid))
			require.FileExists(t, p)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			nv, err := NewVendorWriter(dir, "k8s.gpu.nvidia.com", edits)
			require.NoError(t, err)
			tc.run(t, nv, dir)
		})
	}
}
