package localcluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// identity is a client certificate of the cluster: its subject and the
// kubeconfig it goes into (empty: none).
type identity struct {
	name   string // file name in pki/ and kubeconfig/
	cn     string
	groups []string
}

// pki is the throw-away PKI of a cluster: one CA, the API server's serving
// certificate, a client certificate per identity and the service-account
// signing key. All keys are ECDSA P-256 (the tokens are signed with ES256).
type pki struct {
	dir    string
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	now    time.Time
}

func (c *Cluster) identities() []identity {
	ids := []identity{
		{name: "admin", cn: "gpudra-admin", groups: []string{"system:masters"}},
		{name: "apiserver-kubelet-client", cn: "kube-apiserver-kubelet-client", groups: []string{"system:masters"}},
		{name: "kube-scheduler", cn: "system:kube-scheduler"},
		{name: "kube-controller-manager", cn: "system:kube-controller-manager"},
		{name: "kube-proxy", cn: "system:kube-proxy"},
	}
	for _, n := range c.cfg.Nodes {
		ids = append(ids, identity{name: "node-" + n.Name, cn: "system:node:" + n.Name, groups: []string{"system:nodes"}})
	}
	return ids
}

// makePKI writes pki/ and kubeconfig/.
func (c *Cluster) makePKI() error {
	c.mu.Lock()
	c.client, c.httpClient = nil, nil // they trust and present the old PKI
	c.mu.Unlock()
	p := &pki{dir: c.PKIDir(), now: time.Now()}
	for _, d := range []string{c.PKIDir(), c.KubeconfigDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	if err := p.makeCA(); err != nil {
		return err
	}
	serviceIP, err := firstServiceIP(c.cfg.ServiceCIDR)
	if err != nil {
		return err
	}
	sans := []string{"127.0.0.1", serviceIP.String(), c.cfg.HostIP, "localhost", "kubernetes",
		"kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	if err := p.sign("apiserver", "kube-apiserver", nil, sans, x509.ExtKeyUsageServerAuth); err != nil {
		return err
	}
	for _, id := range c.identities() {
		if err := p.sign(id.name, id.cn, id.groups, nil, x509.ExtKeyUsageClientAuth); err != nil {
			return err
		}
		if id.name == "apiserver-kubelet-client" {
			continue
		}
		if err := c.writeKubeconfig(id); err != nil {
			return err
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	if err := writeKey(filepath.Join(p.dir, "sa.key"), key); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(p.dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

// addIdentity signs one more client certificate with the cluster's CA and
// writes its kubeconfig (a node that joins a running cluster).
func (c *Cluster) addIdentity(id identity) error {
	p := &pki{dir: c.PKIDir(), now: time.Now()}
	crt, err := os.ReadFile(filepath.Join(p.dir, "ca.crt"))
	if err != nil {
		return err
	}
	key, err := os.ReadFile(filepath.Join(p.dir, "ca.key"))
	if err != nil {
		return err
	}
	cb, _ := pem.Decode(crt)
	kb, _ := pem.Decode(key)
	if cb == nil || kb == nil {
		return fmt.Errorf("the cluster CA in %s is not PEM", p.dir)
	}
	if p.caCert, err = x509.ParseCertificate(cb.Bytes); err != nil {
		return fmt.Errorf("the cluster CA certificate: %w", err)
	}
	if p.caKey, err = x509.ParseECPrivateKey(kb.Bytes); err != nil {
		return fmt.Errorf("the cluster CA key: %w", err)
	}
	if err := p.sign(id.name, id.cn, id.groups, nil, x509.ExtKeyUsageClientAuth); err != nil {
		return err
	}
	return c.writeKubeconfig(id)
}

func (p *pki) makeCA() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "gpudra-localcluster-ca"},
		NotBefore:             p.now.Add(-time.Hour),
		NotAfter:              p.now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("self-sign the cluster CA: %w", err)
	}
	if p.caCert, err = x509.ParseCertificate(der); err != nil {
		return err
	}
	p.caKey = key
	if err := writeKey(filepath.Join(p.dir, "ca.key"), key); err != nil {
		return err
	}
	return writeCert(filepath.Join(p.dir, "ca.crt"), der)
}

func (p *pki) sign(name, cn string, groups, sans []string, usage x509.ExtKeyUsage) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn, Organization: groups},
		NotBefore:    p.now.Add(-time.Hour),
		NotAfter:     p.now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	for _, s := range sans {
		if ip := net.ParseIP(s); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, s)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		return fmt.Errorf("sign the certificate %s: %w", name, err)
	}
	if err := writeKey(filepath.Join(p.dir, name+".key"), key); err != nil {
		return err
	}
	return writeCert(filepath.Join(p.dir, name+".crt"), der)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	return n
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}

func writeCert(path string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

// writeKubeconfig writes the kubeconfig of an identity, certificates embedded.
func (c *Cluster) writeKubeconfig(id identity) error {
	read := func(f string) ([]byte, error) { return os.ReadFile(filepath.Join(c.PKIDir(), f)) }
	ca, err := read("ca.crt")
	if err != nil {
		return err
	}
	crt, err := read(id.name + ".crt")
	if err != nil {
		return err
	}
	key, err := read(id.name + ".key")
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["gpudra"] = &clientcmdapi.Cluster{Server: c.apiserverURL(), CertificateAuthorityData: ca}
	cfg.AuthInfos[id.cn] = &clientcmdapi.AuthInfo{ClientCertificateData: crt, ClientKeyData: key}
	cfg.Contexts["gpudra"] = &clientcmdapi.Context{Cluster: "gpudra", AuthInfo: id.cn}
	cfg.CurrentContext = "gpudra"
	return clientcmd.WriteToFile(*cfg, c.Kubeconfig(id.name))
}

// firstServiceIP is the kubernetes Service's ClusterIP: the first address of
// the service range.
func firstServiceIP(cidr string) (net.IP, error) {
	_, n, err := net.ParseCIDR(cidr)
	if err != nil {
		return nil, fmt.Errorf("service CIDR %q: %w", cidr, err)
	}
	ip := n.IP.To4()
	if ip == nil {
		return nil, fmt.Errorf("service CIDR %q: only IPv4 is supported", cidr)
	}
	out := make(net.IP, 4)
	copy(out, ip)
	out[3]++
	return out, nil
}
