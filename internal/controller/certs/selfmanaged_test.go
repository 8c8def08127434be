package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	certutil "k8s.io/client-go/util/cert"
)

const (
	testNS     = "gpudra-system"
	testSecret = "gpudra-webhook-tls"
	testConfig = "gpudra-controller"
)

func webhookConfig() *admissionregistrationv1.ValidatingWebhookConfiguration {
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: testConfig},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			{Name: "a.gpu.gpudra.io", ClientConfig: admissionregistrationv1.WebhookClientConfig{CABundle: []byte("stale")}},
			{Name: "b.gpu.gpudra.io"},
		},
	}
}

func tlsSecret(b *Bundle) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: testSecret, Namespace: testNS},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{CertKey: b.CertPEM, KeyKey: b.KeyPEM, CAKey: b.CAPEM},
	}
}

type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

func newManager(client *fake.Clientset, c *clock) *SelfManaged {
	return &SelfManaged{
		Client: client, Namespace: testNS, SecretName: testSecret,
		DNSNames: ServiceDNSNames("gpudra-controller", testNS), WebhookConfigName: testConfig,
		Holder: &Holder{}, Now: c.Now,
	}
}

func getSecret(t *testing.T, client *fake.Clientset) *corev1.Secret {
	t.Helper()
	s, err := client.CoreV1().Secrets(testNS).Get(context.Background(), testSecret, metav1.GetOptions{})
	require.NoError(t, err)
	return s
}

func assertCABundle(t *testing.T, client *fake.Clientset, want []byte) {
	t.Helper()
	cfg, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(context.Background(), testConfig, metav1.GetOptions{})
	require.NoError(t, err)
	for _, wh := range cfg.Webhooks {
		assert.Equal(t, string(want), string(wh.ClientConfig.CABundle), "caBundle of webhook %s", wh.Name)
	}
}

func servedLeaf(t *testing.T, h *Holder) *x509.Certificate {
	t.Helper()
	cert, err := h.GetCertificate(&tls.ClientHelloInfo{})
	require.NoError(t, err)
	return cert.Leaf
}

func secretWrites(client *fake.Clientset) (verbs []string) {
	for _, a := range client.Actions() {
		if a.GetResource().Resource == "secrets" && (a.GetVerb() == "create" || a.GetVerb() == "update") {
			verbs = append(verbs, a.GetVerb())
		}
	}
	return verbs
}

func TestSelfManagedReconcile(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	names := ServiceDNSNames("gpudra-controller", testNS)
	fresh, err := Generate(names, t0.Add(-24*time.Hour), DefaultValidity, nil)
	require.NoError(t, err)
	expiring, err := Generate(names, t0.Add(-340*24*time.Hour), DefaultValidity, nil)
	require.NoError(t, err)
	wrongNames, err := Generate([]string{"other.ns.svc"}, t0, DefaultValidity, nil)
	require.NoError(t, err)

	tests := []struct {
		name       string
		objects    []runtime.Object
		wantWrites []string
		wantSame   *Bundle // the Secret must still hold this bundle
		wantCAs    int     // CA certificates in ca.crt after the reconcile
	}{
		{name: "creates the Secret when missing", objects: []runtime.Object{webhookConfig()},
			wantWrites: []string{"create"}, wantCAs: 1},
		{name: "reuses a valid Secret", objects: []runtime.Object{webhookConfig(), tlsSecret(fresh)},
			wantSame: fresh, wantCAs: 1},
		{name: "rotates an expiring Secret, keeping the old CA", objects: []runtime.Object{webhookConfig(), tlsSecret(expiring)},
			wantWrites: []string{"update"}, wantCAs: 2},
		{name: "replaces a certificate for other names", objects: []runtime.Object{webhookConfig(), tlsSecret(wrongNames)},
			wantWrites: []string{"update"}, wantCAs: 2},
		{name: "replaces garbage", objects: []runtime.Object{webhookConfig(), tlsSecret(&Bundle{CertPEM: []byte("x")})},
			wantWrites: []string{"update"}, wantCAs: 1},
		{name: "works without a webhook configuration", wantWrites: []string{"create"}, wantCAs: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(tc.objects...)
			m := newManager(client, &clock{now: t0})
			require.NoError(t, m.Reconcile(t.Context()))

			assert.Equal(t, tc.wantWrites, secretWrites(client))
			secret := getSecret(t, client)
			got := BundleFromSecret(secret)
			require.NoError(t, Check(got, names, t0, DefaultRotateBefore), "the Secret must now be usable")
			if tc.wantSame != nil {
				assert.Equal(t, tc.wantSame.CertPEM, got.CertPEM)
			} else {
				assert.Equal(t, ManagedByValue, secret.Labels[ManagedByLabel])
			}
			cas, err := certutil.ParseCertsPEM(got.CAPEM)
			require.NoError(t, err)
			assert.Len(t, cas, tc.wantCAs)
			if len(tc.objects) > 0 {
				assertCABundle(t, client, got.CAPEM)
			}
			gotPEM, err := certutil.ParseCertsPEM(got.CertPEM)
			require.NoError(t, err)
			assert.True(t, servedLeaf(t, m.Holder).Equal(gotPEM[0]), "the holder serves the Secret's certificate")
		})
	}
}

func TestSelfManagedInvalidSettings(t *testing.T) {
	m := newManager(fake.NewClientset(), &clock{now: time.Now()})
	m.RotateBefore = 400 * 24 * time.Hour
	err := m.Reconcile(t.Context())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "must be shorter than the validity")
}

// TestRotationServesNewCertificate moves the clock past the rotation
// threshold and checks that a TLS client trusting the caBundle connects
// before and after, and gets the new certificate after the rotation.
func TestRotationServesNewCertificate(t *testing.T) {
	c := &clock{now: time.Now()}
	client := fake.NewClientset(webhookConfig())
	m := newManager(client, c)
	require.NoError(t, m.Reconcile(t.Context()))
	first := servedLeaf(t, m.Holder)

	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.TLS = m.Holder.TLSConfig()
	srv.StartTLS()
	defer srv.Close()
	handshake := func() *x509.Certificate {
		cfg, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(t.Context(), testConfig, metav1.GetOptions{})
		require.NoError(t, err)
		pool := x509.NewCertPool()
		require.True(t, pool.AppendCertsFromPEM(cfg.Webhooks[0].ClientConfig.CABundle))
		conn, err := tls.Dial("tcp", srv.Listener.Addr().String(), &tls.Config{RootCAs: pool, ServerName: m.DNSNames[0], MinVersion: tls.VersionTLS12, Time: c.Now})
		require.NoError(t, err)
		defer func() { _ = conn.Close() }()
		return conn.ConnectionState().PeerCertificates[0]
	}
	assert.True(t, handshake().Equal(first))

	c.now = c.now.Add(200 * 24 * time.Hour)
	require.NoError(t, m.Reconcile(t.Context()))
	assert.True(t, servedLeaf(t, m.Holder).Equal(first), "not due yet")

	c.now = c.now.Add(140 * 24 * time.Hour)
	require.NoError(t, m.Reconcile(t.Context()))
	second := servedLeaf(t, m.Holder)
	assert.False(t, second.Equal(first), "rotated")
	assert.True(t, handshake().Equal(second), "new handshakes get the new certificate")
}

// TestRunRepairsCABundle resets the caBundle as an upgrade might and expects
// Run to restore it without waiting for the check interval.
func TestRunRepairsCABundle(t *testing.T) {
	client := fake.NewClientset(webhookConfig())
	m := newManager(client, &clock{now: time.Now()})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- m.Run(ctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()

	require.Eventually(t, m.Holder.Ready, 10*time.Second, 10*time.Millisecond)
	want := getSecret(t, client).Data[CAKey]
	assertCABundle(t, client, want)

	cfg := webhookConfig()
	cfg.Webhooks[1].ClientConfig.CABundle = nil
	_, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(t.Context(), cfg, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		got, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(t.Context(), testConfig, metav1.GetOptions{})
		return err == nil && string(got.Webhooks[1].ClientConfig.CABundle) == string(want) &&
			string(got.Webhooks[0].ClientConfig.CABundle) == string(want)
	}, 10*time.Second, 10*time.Millisecond)
}

func TestReconcileReportsAPIErrors(t *testing.T) {
	client := fake.NewClientset()
	client.PrependReactor("get", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, assert.AnError
	})
	m := newManager(client, &clock{now: time.Now()})
	err := m.Reconcile(t.Context())
	require.ErrorIs(t, err, assert.AnError)
	assert.Contains(t, err.Error(), "check the controller's RBAC")
	assert.False(t, m.Holder.Ready())
}

// TestSelfManagedIPSAN configures an IP address among the names, as for a
// webhook reached by URL (https://127.0.0.1:<port>/...): a Secret issued
// without it is renewed, and a client that dials the IP and trusts the
// caBundle accepts the served certificate.
func TestSelfManagedIPSAN(t *testing.T) {
	now := time.Now()
	withoutIP, err := Generate(ServiceDNSNames("gpudra-controller", testNS), now, DefaultValidity, nil)
	require.NoError(t, err)
	client := fake.NewClientset(webhookConfig(), tlsSecret(withoutIP))
	m := newManager(client, &clock{now: now})
	m.DNSNames = ServiceDNSNames("gpudra-controller", testNS, "127.0.0.1")
	require.NoError(t, m.Reconcile(t.Context()))
	assert.Equal(t, []string{"update"}, secretWrites(client), "a certificate without the IP SAN is renewed")
	require.NoError(t, m.Reconcile(t.Context()))
	assert.Equal(t, []string{"update"}, secretWrites(client), "the renewed one is kept")

	// Serve the holder's certificate on a bare TLS listener: httptest would
	// fall back to its own certificate for clients that send no SNI, and a
	// client dialling an IP sends none.
	ln, err := tls.Listen("tcp", "127.0.0.1:0", m.Holder.TLSConfig())
	require.NoError(t, err)
	defer func() { _ = ln.Close() }()
	go func() {
		conn, err := ln.Accept()
		if err == nil {
			_ = conn.(*tls.Conn).Handshake()
			_ = conn.Close()
		}
	}()
	cfg, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(t.Context(), testConfig, metav1.GetOptions{})
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(cfg.Webhooks[0].ClientConfig.CABundle))
	// No ServerName: the client verifies the certificate against the IP it dials.
	conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	require.NoError(t, err, "TLS to %s trusting the caBundle", ln.Addr())
	_ = conn.Close()
}
