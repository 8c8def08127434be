package certs

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	certutil "k8s.io/client-go/util/cert"
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
