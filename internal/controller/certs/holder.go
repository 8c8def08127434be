package certs

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Holder keeps the serving certificate a TLS server presents. Whatever loads
// new material (rotation, a Secret or file watch) calls Load; the server's
// tls.Config.GetCertificate picks it up on the next handshake.
type Holder struct {
	mu      sync.RWMutex
	cert    *tls.Certificate
	certPEM []byte
	keyPEM  []byte
}

// Load replaces the served certificate with certPEM and keyPEM. It reports
// whether they differ from what was loaded before; on error the previous
// certificate stays in use.
func (h *Holder) Load(certPEM, keyPEM []byte) (bool, error) {
	h.mu.RLock()
	same := h.cert != nil && bytes.Equal(h.certPEM, certPEM) && bytes.Equal(h.keyPEM, keyPEM)
	h.mu.RUnlock()
	if same {
		return false, nil
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return false, fmt.Errorf("load serving certificate: %w", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cert = &pair
	h.certPEM = bytes.Clone(certPEM)
	h.keyPEM = bytes.Clone(keyPEM)
	return true, nil
}

// GetCertificate returns the current certificate; use it as
// tls.Config.GetCertificate.
func (h *Holder) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.cert == nil {
		return nil, errors.New("no serving certificate loaded yet")
	}
	return h.cert, nil
}

// Ready reports whether a certificate is loaded.
func (h *Holder) Ready() bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.cert != nil
}

// NotAfter returns the expiry of the current certificate, or the zero time
// when none is loaded.
func (h *Holder) NotAfter() time.Time {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.cert == nil || h.cert.Leaf == nil {
		return time.Time{}
	}
	return h.cert.Leaf.NotAfter
}

// TLSConfig returns a server TLS configuration (TLS 1.2 or later) that
// serves the holder's current certificate.
func (h *Holder) TLSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: h.GetCertificate}
}
