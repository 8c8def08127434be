package cdplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
)

// healthServer serves /healthz (the process answers) and /readyz (the
// kubelet confirmed the registration, as the GPU plugin's readyz checks).
// It is served from the start of the plugin: while the plugin waits for
// the NVLink fabric registration (waitClique) /readyz says so, and until
// the kubelet plugin is started (setHelper) that it is not yet; once
// running, while the fabric watch withdrew the channels
// (setFabricProblem), why.
type healthServer struct {
	srv     *http.Server
	Addr    net.Addr
	waiting atomic.Pointer[string]
	// fabric is why the running plugin withdrew its channels (fabricWatch).
	fabric atomic.Pointer[string]
	helper atomic.Pointer[kubeletplugin.Helper]
}

// serveHealth serves on l when it is not nil (tests), else on addr; with
// neither it serves nothing and returns nil, whose methods do nothing.
func serveHealth(ctx context.Context, addr string, l net.Listener) (*healthServer, error) {
	if addr == "" && l == nil {
		return nil, nil
	}
	if l == nil {
		var err error
		if l, err = net.Listen("tcp", addr); err != nil {
			return nil, fmt.Errorf("listen on --health-address %s: %w", addr, err)
		}
	}
	hs := &healthServer{Addr: l.Addr()}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if msg := hs.waiting.Load(); msg != nil {
			http.Error(w, "nvlink-fabric: not publishing IMEX channels until the registration completes: "+*msg, http.StatusInternalServerError)
			return
		}
		if msg := hs.fabric.Load(); msg != nil {
			http.Error(w, "nvlink-fabric: "+*msg, http.StatusInternalServerError)
			return
		}
		helper := hs.helper.Load()
		if helper == nil {
			http.Error(w, "kubelet-registration: the kubelet plugin is not started yet", http.StatusInternalServerError)
			return
		}
		switch st := helper.RegistrationStatus(); {
		case st == nil:
			http.Error(w, "kubelet-registration: the kubelet has not confirmed the registration yet", http.StatusInternalServerError)
		case !st.PluginRegistered:
			http.Error(w, "kubelet-registration: the kubelet refused the registration: "+st.Error, http.StatusInternalServerError)
		default:
			_, _ = w.Write([]byte("ok"))
		}
	})
	hs.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := hs.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "Health endpoint stopped", "address", addr)
		}
	}()
	return hs, nil
}

// setWaiting sets why the plugin waits before it starts (empty: it does
// not wait).
func (h *healthServer) setWaiting(msg string) {
	if h == nil {
		return
	}
	if msg == "" {
		h.waiting.Store(nil)
		return
	}
	h.waiting.Store(&msg)
}

// setFabricProblem sets why the running plugin publishes no channels
// (empty: it publishes them).
func (h *healthServer) setFabricProblem(msg string) {
	if h == nil {
		return
	}
	if msg == "" {
		h.fabric.Store(nil)
		return
	}
	h.fabric.Store(&msg)
}

// setHelper hands /readyz the started kubelet plugin.
func (h *healthServer) setHelper(helper *kubeletplugin.Helper) {
	if h != nil {
		h.helper.Store(helper)
	}
}

func (h *healthServer) close() {
	if h != nil {
		_ = h.srv.Close()
	}
}
