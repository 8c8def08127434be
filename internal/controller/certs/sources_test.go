package certs

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	certutil "k8s.io/client-go/util/cert"
)

func leafOf(t *testing.T, b *Bundle) string {
	t.Helper()
	certs, err := certutil.ParseCertsPEM(b.CertPEM)
	require.NoError(t, err)
	return certs[0].SerialNumber.String()
}

func servedSerial(h *Holder) string {
	if !h.Ready() {
		return ""
	}
	c, _ := h.GetCertificate(nil)
	return c.Leaf.SerialNumber.String()
}

func TestSecretSource(t *testing.T) {
	names := ServiceDNSNames("wh", testNS)
	first, err := Generate(names, time.Now(), DefaultValidity, nil)
	require.NoError(t, err)
	second, err := Generate(names, time.Now(), DefaultValidity, nil)
	require.NoError(t, err)

	client := fake.NewClientset()
	src := &SecretSource{Client: client, Namespace: testNS, Name: testSecret, Holder: &Holder{}}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- src.Run(ctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()

	require.Eventually(t, src.HasSynced, 10*time.Second, 10*time.Millisecond)
	assert.False(t, src.Holder.Ready(), "no Secret yet")

	secrets := client.CoreV1().Secrets(testNS)
	_, err = secrets.Create(t.Context(), tlsSecret(first), metaCreate)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return servedSerial(src.Holder) == leafOf(t, first) }, 10*time.Second, 10*time.Millisecond)

	broken := tlsSecret(&Bundle{CertPEM: []byte("broken"), KeyPEM: first.KeyPEM})
	_, err = secrets.Update(t.Context(), broken, metaUpdate)
	require.NoError(t, err)
	_, err = secrets.Update(t.Context(), tlsSecret(second), metaUpdate)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return servedSerial(src.Holder) == leafOf(t, second) }, 10*time.Second, 10*time.Millisecond)

	require.NoError(t, secrets.Delete(t.Context(), testSecret, metaDelete))
	time.Sleep(50 * time.Millisecond)
	assert.Equal(t, leafOf(t, second), servedSerial(src.Holder), "a deleted Secret keeps the last certificate")
}

func TestFileSource(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	write := func(b *Bundle) {
		require.NoError(t, os.WriteFile(certFile, b.CertPEM, 0o600))
		require.NoError(t, os.WriteFile(keyFile, b.KeyPEM, 0o600))
	}
	names := []string{"wh.ns.svc"}
	first, err := Generate(names, time.Now(), DefaultValidity, nil)
	require.NoError(t, err)
	second, err := Generate(names, time.Now(), DefaultValidity, nil)
	require.NoError(t, err)

	src := &FileSource{CertFile: certFile, KeyFile: keyFile, Holder: &Holder{}, Interval: 10 * time.Millisecond}
	err = src.Load(t.Context())
	require.Error(t, err, "missing files")
	assert.Contains(t, err.Error(), "--cert-file")

	write(first)
	require.NoError(t, src.Load(t.Context()))
	assert.Equal(t, leafOf(t, first), servedSerial(src.Holder))

	require.NoError(t, os.WriteFile(keyFile, second.KeyPEM, 0o600)) // half-written pair
	require.Error(t, src.Load(t.Context()))
	assert.Equal(t, leafOf(t, first), servedSerial(src.Holder), "a bad pair keeps the current certificate")

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- src.Run(ctx) }()
	write(second)
	require.Eventually(t, func() bool { return servedSerial(src.Holder) == leafOf(t, second) }, 10*time.Second, 10*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
}

func TestHolder(t *testing.T) {
	h := &Holder{}
	assert.False(t, h.Ready())
	assert.True(t, h.NotAfter().IsZero())
	_, err := h.GetCertificate(nil)
	require.Error(t, err)

	b, err := Generate([]string{"a"}, time.Now(), time.Hour, nil)
	require.NoError(t, err)
	changed, err := h.Load(b.CertPEM, b.KeyPEM)
	require.NoError(t, err)
	assert.True(t, changed)
	changed, err = h.Load(b.CertPEM, b.KeyPEM)
	require.NoError(t, err)
	assert.False(t, changed, "same material")
	assert.WithinDuration(t, time.Now().Add(time.Hour), h.NotAfter(), 2*time.Second)
	_, err = h.Load([]byte("x"), b.KeyPEM)
	require.Error(t, err)
	assert.True(t, h.Ready())
}

var (
	metaCreate = metav1.CreateOptions{}
	metaUpdate = metav1.UpdateOptions{}
	metaDelete = metav1.DeleteOptions{}
)
