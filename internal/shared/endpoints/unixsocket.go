package endpoints

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
)

// PrivateSocket listens on a Unix socket that only its owner may connect to
// (the kubelet plugins and the kubelet all run as root). The kubelet-plugin
// helper's own listener leaves the mode to the umask: with umask 0, as in
// some container images, anybody on the node could call
// NodePrepareResources. The GPU plugin and the ComputeDomain channel plugin
// pass it for the registration socket and dra.sock.
func PrivateSocket(ctx context.Context, path string) (net.Listener, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("restrict socket %s to its owner: %w", path, err)
	}
	return l, nil // a *net.UnixListener removes its socket file on Close
}
