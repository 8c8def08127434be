package endpoints

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// The socket is its owner's only, even under umask 0, and a stale one is
// replaced.
func TestPrivateSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dra.sock")
	if err := os.WriteFile(path, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	l, err := PrivateSocket(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket %s: mode %v, want a socket with 0600", path, fi.Mode())
	}
}
