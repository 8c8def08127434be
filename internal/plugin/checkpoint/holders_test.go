package checkpoint

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHolders(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, dir, testBootID)
	hs, err := s.Holders("gpu-0")
	require.NoError(t, err)
	require.Empty(t, hs)

	require.NoError(t, s.AddHolder("gpu-0", Holder{ClaimUID: "a", Claim: "ns/a", Access: "exclusive"}))
	require.NoError(t, s.AddHolder("gpu-0", Holder{ClaimUID: "b", Claim: "ns/b", Access: "share"}))
	require.NoError(t, s.AddHolder("gpu-1", Holder{ClaimUID: "a", Claim: "ns/a", Access: "exclusive"}))
	hs, err = s.Holders("gpu-0")
	require.NoError(t, err)
	require.ElementsMatch(t, []Holder{{"a", "ns/a", "exclusive"}, {"b", "ns/b", "share"}}, hs)

	// A second process on the same directory sees the same holders.
	other := openTestStore(t, dir, testBootID)
	held, err := other.HeldDevices()
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"a", "b"}, held["gpu-0"])
	require.Equal(t, []string{"a"}, held["gpu-1"])

	require.NoError(t, s.RemoveHolder("gpu-0", "a"))
	require.NoError(t, s.RemoveHolder("gpu-0", "a"), "removing twice is fine")
	hs, err = s.Holders("gpu-0")
	require.NoError(t, err)
	require.Equal(t, []Holder{{"b", "ns/b", "share"}}, hs)

	// Holders are ignored by LoadAll and pruned with their boot.
	res, err := s.LoadAll()
	require.NoError(t, err)
	require.Empty(t, res.Corrupt)
	next := openTestStore(t, dir, "next-boot")
	require.NoError(t, next.PruneStale())
	held, err = next.HeldDevices()
	require.NoError(t, err)
	require.Empty(t, held)

	for _, bad := range []string{"", "../x", "GPU-0", "a/b"} {
		require.Error(t, s.AddHolder(bad, Holder{ClaimUID: "a"}), bad)
	}
	require.Error(t, s.AddHolder("gpu-0", Holder{ClaimUID: "../a"}))
}

// A holder write interrupted by a crash leaves an atomicfile temp file,
// never an empty holder file; Holders and HeldDevices skip the temp file.
func TestHoldersSkipTempFiles(t *testing.T) {
	s := openTestStore(t, t.TempDir(), testBootID)
	require.NoError(t, s.AddHolder("gpu-0", Holder{ClaimUID: "a", Claim: "ns/a", Access: "exclusive"}))
	dir, err := s.holderDir("gpu-0")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, ".b.tmp-123"), []byte("share ns/b"), 0o600))
	hs, err := s.Holders("gpu-0")
	require.NoError(t, err)
	require.Equal(t, []Holder{{"a", "ns/a", "exclusive"}}, hs)
	held, err := s.HeldDevices()
	require.NoError(t, err)
	require.Equal(t, map[string][]string{"gpu-0": {"a"}}, held)
	fi, err := os.Stat(filepath.Join(dir, "a"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
}

// The holders of a multi-GPU claim are one file linked into each device's
// directory: readers see a regular file per device with the same content,
// and removing one leaves the others.
func TestAddHoldersLinksOneFile(t *testing.T) {
	s := openTestStore(t, t.TempDir(), testBootID)
	devices := []string{"gpu-0", "gpu-1", "gpu-2", "gpu-3", "gpu-4", "gpu-5", "gpu-6", "gpu-7"}
	// An interrupted earlier attempt left a holder of this claim on gpu-3
	// with other content, and another claim shares gpu-5.
	require.NoError(t, s.AddHolder("gpu-3", Holder{ClaimUID: "a", Claim: "ns/old", Access: "share"}))
	require.NoError(t, s.AddHolder("gpu-5", Holder{ClaimUID: "b", Claim: "ns/b", Access: "admin"}))

	h := Holder{ClaimUID: "a", Claim: "ns/a", Access: "exclusive"}
	require.NoError(t, s.AddHolders(h, devices...))

	var first os.FileInfo
	for _, d := range devices {
		hs, err := s.Holders(d)
		require.NoError(t, err)
		require.Contains(t, hs, h, d)
		dir, err := s.holderDir(d)
		require.NoError(t, err)
		fi, err := os.Stat(filepath.Join(dir, "a"))
		require.NoError(t, err)
		require.True(t, fi.Mode().IsRegular())
		if d == "gpu-3" {
			continue // written on its own over the leftover
		}
		if first == nil {
			first = fi
			continue
		}
		require.True(t, os.SameFile(first, fi), "%s links the claim's one holder file", d)
	}
	hs, err := s.Holders("gpu-5")
	require.NoError(t, err)
	require.ElementsMatch(t, []Holder{h, {"b", "ns/b", "admin"}}, hs)

	require.NoError(t, s.RemoveHolder("gpu-0", "a"))
	for _, d := range devices[1:] {
		hs, err := s.Holders(d)
		require.NoError(t, err)
		require.Contains(t, hs, h, d)
	}
	held, err := s.HeldDevices()
	require.NoError(t, err)
	require.NotContains(t, held, "gpu-0")
	require.Len(t, held, 7)

	require.Error(t, s.AddHolders(h, "gpu-8", "GPU-9"), "an invalid device name")
	require.Error(t, s.AddHolders(Holder{ClaimUID: "../a"}, "gpu-0"))
}
