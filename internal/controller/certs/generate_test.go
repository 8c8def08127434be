package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

func TestServiceDNSNames(t *testing.T) {
	tests := []struct {
		name  string
		extra []string
		want  []string
	}{
		{name: "service only", want: []string{"wh.ns.svc", "wh.ns.svc.cluster.local"}},
		{name: "extra names, duplicates and empties dropped", extra: []string{"", "wh.example.com", "wh.ns.svc"},
			want: []string{"wh.ns.svc", "wh.ns.svc.cluster.local", "wh.example.com"}},
		{name: "IP addresses are kept as given", extra: []string{"127.0.0.1", "::1", "127.0.0.1"},
			want: []string{"wh.ns.svc", "wh.ns.svc.cluster.local", "127.0.0.1", "::1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, ServiceDNSNames("wh", "ns", tc.extra...))
		})
	}
}

func TestCheck(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	names := ServiceDNSNames("wh", "ns")
	valid, err := Generate(names, now, DefaultValidity, nil)
	require.NoError(t, err)
	other, err := Generate(names, now, DefaultValidity, nil)
	require.NoError(t, err)
	old, err := Generate(names, now.Add(-340*24*time.Hour), DefaultValidity, nil)
	require.NoError(t, err)
	ipNames := ServiceDNSNames("wh", "ns", "127.0.0.1", "::1")
	withIPs, err := Generate(ipNames, now, DefaultValidity, nil)
	require.NoError(t, err)
	ipAsDNS := forgeDNSOnly(t, "10.0.0.1", now)

	tests := []struct {
		name    string
		bundle  *Bundle
		names   []string
		wantErr string // "" = usable
	}{
		{name: "valid", bundle: valid, names: names},
		{name: "subset of names is fine", bundle: valid, names: names[:1]},
		{name: "missing name", bundle: valid, names: append(names, "wh.example.com"), wantErr: `not valid for "wh.example.com"`},
		{name: "expires within threshold", bundle: old, names: names, wantErr: "within the rotation threshold of 720h0m0s"},
		{name: "key of another pair", bundle: &Bundle{CertPEM: valid.CertPEM, KeyPEM: other.KeyPEM, CAPEM: valid.CAPEM},
			names: names, wantErr: "do not form a key pair"},
		{name: "CA of another pair", bundle: &Bundle{CertPEM: valid.CertPEM, KeyPEM: valid.KeyPEM, CAPEM: other.CAPEM},
			names: names, wantErr: "does not verify against ca.crt"},
		{name: "no CA", bundle: &Bundle{CertPEM: valid.CertPEM, KeyPEM: valid.KeyPEM}, names: names, wantErr: "ca.crt holds no PEM certificate"},
		{name: "empty", bundle: &Bundle{}, names: names, wantErr: "do not form a key pair"},
		{name: "IP SAN missing", bundle: valid, names: append(names, "127.0.0.1"),
			wantErr: "not valid for IP address 127.0.0.1 (it covers [wh.ns.svc wh.ns.svc.cluster.local])"},
		{name: "IP SANs present", bundle: withIPs, names: ipNames},
		{name: "IP given in another notation", bundle: withIPs, names: []string{"::ffff:127.0.0.1", "0:0:0:0:0:0:0:1"}},
		{name: "an IP as a DNS SAN does not count", bundle: ipAsDNS, names: []string{"10.0.0.1"},
			wantErr: "not valid for IP address 10.0.0.1"},
		{name: "another IP", bundle: withIPs, names: []string{"127.0.0.2"},
			wantErr: "it covers [wh.ns.svc wh.ns.svc.cluster.local 127.0.0.1 ::1]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(tc.bundle, tc.names, now, DefaultRotateBefore)
			if tc.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.wantErr)
		})
	}
}

func TestGenerate(t *testing.T) {
	now := time.Now()
	_, err := Generate(nil, now, DefaultValidity, nil)
	require.Error(t, err)

	prev, err := Generate([]string{"a.svc"}, now, DefaultValidity, nil)
	require.NoError(t, err)
	b, err := Generate([]string{"a.svc", "b.svc"}, now, DefaultValidity, prev.CAPEM)
	require.NoError(t, err)
	cas, err := certutil.ParseCertsPEM(b.CAPEM)
	require.NoError(t, err)
	require.Len(t, cas, 2, "new CA followed by the previous one")
	assert.True(t, cas[0].IsCA)
	leaf, err := certutil.ParseCertsPEM(b.CertPEM)
	require.NoError(t, err)
	assert.Equal(t, []string{"a.svc", "b.svc"}, leaf[0].DNSNames)
	assert.WithinDuration(t, now.Add(DefaultValidity), leaf[0].NotAfter, 2*time.Second)
	assert.True(t, leaf[0].NotBefore.Before(now), "back-dated for clock skew")
	assert.Equal(t, prev.CAPEM, firstValidCA(prev.CAPEM, now))
	assert.Nil(t, firstValidCA(prev.CAPEM, now.Add(2*DefaultValidity)), "expired CA is not kept")
}

func TestGenerateIPSANs(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name     string
		names    []string
		wantCN   string
		wantDNS  []string
		wantIPs  []string
		verifyAs string // a host name a client would dial
	}{
		{name: "service names and loopback", names: ServiceDNSNames("wh", "ns", "127.0.0.1"),
			wantCN: "wh.ns.svc", wantDNS: []string{"wh.ns.svc", "wh.ns.svc.cluster.local"}, wantIPs: []string{"127.0.0.1"},
			verifyAs: "127.0.0.1"},
		{name: "IPv6", names: []string{"wh.ns.svc", "::1", "fd00::10"},
			wantCN: "wh.ns.svc", wantDNS: []string{"wh.ns.svc"}, wantIPs: []string{"::1", "fd00::10"}, verifyAs: "fd00::10"},
		{name: "IPs only: the common name is the first IP", names: []string{"192.0.2.7"},
			wantCN: "192.0.2.7", wantIPs: []string{"192.0.2.7"}, verifyAs: "192.0.2.7"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Generate(tc.names, now, DefaultValidity, nil)
			require.NoError(t, err)
			require.NoError(t, Check(b, tc.names, now, DefaultRotateBefore))
			leaf := parseLeaf(t, b)
			assert.Equal(t, tc.wantCN, leaf.Subject.CommonName)
			assert.Equal(t, tc.wantDNS, leaf.DNSNames)
			var ips []string
			for _, ip := range leaf.IPAddresses {
				ips = append(ips, ip.String())
			}
			assert.Equal(t, tc.wantIPs, ips)

			roots := x509.NewCertPool()
			require.True(t, roots.AppendCertsFromPEM(b.CAPEM))
			_, err = leaf.Verify(x509.VerifyOptions{DNSName: tc.verifyAs, Roots: roots, CurrentTime: now})
			assert.NoError(t, err, "a TLS client dialling %s accepts the certificate", tc.verifyAs)
		})
	}
}

func parseLeaf(t *testing.T, b *Bundle) *x509.Certificate {
	t.Helper()
	certs, err := certutil.ParseCertsPEM(b.CertPEM)
	require.NoError(t, err)
	require.Len(t, certs, 1)
	return certs[0]
}

// forgeDNSOnly returns a bundle whose certificate lists ip as a DNS SAN
// only, as a generator without IP support would have written it.
func forgeDNSOnly(t *testing.T, ip string, now time.Time) *Bundle {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: ip}, DNSNames: []string{ip},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(DefaultValidity),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	require.NoError(t, err)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return &Bundle{CertPEM: certPEM, KeyPEM: keyPEM, CAPEM: certPEM}
}
