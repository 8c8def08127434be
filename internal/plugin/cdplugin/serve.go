package cdplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
)

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
