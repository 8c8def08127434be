package plugin

import (
	"errors"
	"net/http"
	"sync/atomic"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// registration is the kubelet's answer to the plugin's registration, for
// /readyz: a plugin that serves its sockets but is not registered yet (the
// kubelet has not found the registration socket, or refused it) cannot
// prepare claims, and a pod scheduled then fails with "driver not
// registered" until the kubelet's retry. The chart's readiness probe makes
// the DaemonSet's rollout wait for it.
type registration struct {
	status atomic.Pointer[func() *registerapi.RegistrationStatus]
}

// attach reads the status from the helper from now on.
func (r *registration) attach(h *kubeletplugin.Helper) {
	f := h.RegistrationStatus
	r.status.Store(&f)
}

// check fails until the kubelet reported a successful registration.
func (r *registration) check(*http.Request) error {
	f := r.status.Load()
	if f == nil {
		return errors.New("the kubelet plugin helper has not started")
	}
	st := (*f)()
	switch {
	case st == nil:
		return errors.New("the kubelet has not confirmed the registration yet")
	case !st.PluginRegistered:
		return errors.New("the kubelet refused the registration: " + st.Error)
	}
	return nil
}
