package cdplugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
)

// privateSocket listens on a Unix socket only its owner (root, like the
// kubelet) may connect to, as the GPU plugin's (internal/plugin's
// privateSocket, of which this is a copy): the helper's own listener
// leaves the mode to the umask.
func privateSocket(ctx context.Context, path string) (net.Listener, error) {
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
	return l, nil
}

// healthServer serves /healthz (the process answers) and /readyz (the
// kubelet confirmed the registration, as the GPU plugin's readyz checks).
type healthServer struct {
	srv  *http.Server
	Addr net.Addr
}

func serveHealth(ctx context.Context, addr string, helper *kubeletplugin.Helper) (*healthServer, error) {
	if addr == "" {
		return nil, nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on --health-address %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		switch st := helper.RegistrationStatus(); {
		case st == nil:
			http.Error(w, "kubelet-registration: the kubelet has not confirmed the registration yet", http.StatusInternalServerError)
		case !st.PluginRegistered:
			http.Error(w, "kubelet-registration: the kubelet refused the registration: "+st.Error, http.StatusInternalServerError)
		default:
			_, _ = w.Write([]byte("ok"))
		}
	})
	hs := &healthServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, Addr: l.Addr()}
	go func() {
		if err := hs.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "Health endpoint stopped", "address", addr)
		}
	}()
	return hs, nil
}

func (h *healthServer) close() {
	if h != nil {
		_ = h.srv.Close()
	}
}
