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
