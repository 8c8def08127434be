package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// Keys of the serving material in a Secret, as in kubernetes.io/tls Secrets
// and cert-manager's.
const (
	CertKey = "tls.crt"
	KeyKey  = "tls.key"
	CAKey   = "ca.crt"
)

// clockSkew back-dates NotBefore so that API servers whose clock is slightly
// behind accept a fresh certificate.
const clockSkew = time.Hour

// Bundle is serving material in PEM: the serving certificate and key, and the
// CA certificates clients should trust (the current CA first, possibly
// followed by the previous one while it is still valid).
type Bundle struct {
	CertPEM []byte
	KeyPEM  []byte
	CAPEM   []byte
}

// ServiceDNSNames returns the names under which the API server reaches the
// webhook Service, followed by any extra names. Extra names may be IP
// addresses (for a webhook configured with clientConfig.url such as
// https://127.0.0.1:9443/...); Generate puts those into the certificate's IP
// SANs.
func ServiceDNSNames(service, namespace string, extra ...string) []string {
	names := []string{
		service + "." + namespace + ".svc",
		service + "." + namespace + ".svc.cluster.local",
	}
	for _, n := range extra {
		if n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}

// splitSANs sorts names into DNS names and IP addresses: an entry that
// parses as an IP address (v4 or v6) is one.
func splitSANs(names []string) (dnsNames []string, ips []net.IP) {
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			ips = append(ips, ip)
			continue
		}
		dnsNames = append(dnsNames, n)
	}
	return dnsNames, ips
}

// Generate creates a new CA and a serving certificate for names signed by
// it, both valid from now (minus a little clock skew) for validity. Names
// that parse as IP addresses become IP SANs, the others DNS SANs; the common
// name is the first DNS name (the first IP if there is none). The CA's key
// is discarded: the next rotation creates a new CA. extraCAs are appended to
// the bundle's CA certificates.
func Generate(names []string, now time.Time, validity time.Duration, extraCAs []byte) (*Bundle, error) {
	if len(names) == 0 {
		return nil, errors.New("generate serving certificate: no DNS names or IP addresses given")
	}
	dnsNames, ips := splitSANs(names)
	commonName := names[0]
	if len(dnsNames) > 0 {
		commonName = dnsNames[0]
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	notBefore, notAfter := now.Add(-clockSkew).UTC(), now.Add(validity).UTC()
	caTemplate := &x509.Certificate{
		Subject:               pkix.Name{CommonName: fmt.Sprintf("gpudra-webhook-ca@%d", now.Unix())},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caCert, err := sign(caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("self-sign CA certificate: %w", err)
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate serving key: %w", err)
	}
	servingTemplate := &x509.Certificate{
		Subject:     pkix.Name{CommonName: commonName},
		DNSNames:    dnsNames,
		IPAddresses: ips,
		NotBefore:   notBefore,
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	serving, err := sign(servingTemplate, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("sign serving certificate: %w", err)
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return nil, fmt.Errorf("encode serving key: %w", err)
	}
	caPEM := encodeCertPEM(caCert)
	if len(extraCAs) > 0 {
		caPEM = append(caPEM, extraCAs...)
	}
	return &Bundle{CertPEM: encodeCertPEM(serving), KeyPEM: keyPEM, CAPEM: caPEM}, nil
}

func sign(template, parent *x509.Certificate, pub *ecdsa.PublicKey, signer *ecdsa.PrivateKey) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	template.SerialNumber = serial
	der, err := x509.CreateCertificate(rand.Reader, template, parent, pub, signer)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}

// Check tells why b cannot be used (any more) to serve names at now: the key
// does not match, a name is missing (an entry that parses as an IP address
// must be among the IP SANs, any other among the DNS SANs), the certificate
// does not chain to the bundle's CAs, or it expires within rotateBefore. It
// returns nil when b can be kept.
func Check(b *Bundle, names []string, now time.Time, rotateBefore time.Duration) error {
	pair, err := tls.X509KeyPair(b.CertPEM, b.KeyPEM)
	if err != nil {
		return fmt.Errorf("%s and %s do not form a key pair: %w", CertKey, KeyKey, err)
	}
	leaf := pair.Leaf
	dnsNames, ips := splitSANs(names)
	for _, n := range dnsNames {
		if !slices.Contains(leaf.DNSNames, n) {
			return fmt.Errorf("certificate is not valid for %q (it covers %v)", n, coveredNames(leaf))
		}
	}
	for _, ip := range ips {
		if !slices.ContainsFunc(leaf.IPAddresses, ip.Equal) {
			return fmt.Errorf("certificate is not valid for IP address %s (it covers %v)", ip, coveredNames(leaf))
		}
	}
	if left := leaf.NotAfter.Sub(now); left <= rotateBefore {
		return fmt.Errorf("certificate expires at %s, within the rotation threshold of %s",
			leaf.NotAfter.UTC().Format(time.RFC3339), rotateBefore)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b.CAPEM) {
		return fmt.Errorf("%s holds no PEM certificate", CAKey)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return fmt.Errorf("certificate does not verify against %s: %w", CAKey, err)
	}
	return nil
}

// coveredNames lists the DNS and IP SANs of a certificate.
func coveredNames(c *x509.Certificate) []string {
	out := slices.Clone(c.DNSNames)
	for _, ip := range c.IPAddresses {
		out = append(out, ip.String())
	}
	return out
}

// firstValidCA returns the first certificate in caPEM, in PEM, if it is still
// valid at now (it is kept in the bundle during a rotation), or nil.
func firstValidCA(caPEM []byte, now time.Time) []byte {
	certs, err := certutil.ParseCertsPEM(caPEM)
	if err != nil || len(certs) == 0 || !certs[0].NotAfter.After(now) {
		return nil
	}
	return encodeCertPEM(certs[0])
}

func encodeCertPEM(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}
