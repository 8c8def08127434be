package localcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

const (
	etcdName              = "etcd"
	apiserverName         = "kube-apiserver"
	schedulerName         = "kube-scheduler"
	controllerManagerName = "kube-controller-manager"
	kubeProxyName         = "kube-proxy"
)

func controlPlaneComponents() []string {
	return []string{etcdName, apiserverName, schedulerName, controllerManagerName, kubeProxyName}
}

func (c *Cluster) startEtcd() error {
	peer := fmt.Sprintf("http://127.0.0.1:%d", c.cfg.EtcdPeerPort)
	client := fmt.Sprintf("http://127.0.0.1:%d", c.cfg.EtcdPort)
	if err := os.MkdirAll(c.EtcdDir(), 0o700); err != nil {
		return err
	}
	// One member on loopback over plain HTTP; no fsync: the data goes with
	// the cluster.
	_, err := c.start(etcdName, []string{c.bin("etcd"), "--name", "gpudra",
		"--data-dir", filepath.Join(c.EtcdDir(), "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "gpudra=" + peer, "--initial-cluster-state", "new",
		"--unsafe-no-fsync", "--log-level", "warn"}, nil)
	return err
}

func (c *Cluster) pkiFile(name string) string { return filepath.Join(c.PKIDir(), name) }

func (c *Cluster) startAPIServer() error {
	_, err := c.start(apiserverName, []string{c.apiserverBinary(),
		// Pods reach it through the kubernetes Service (kube-proxy DNATs to
		// HostIP), the host's clients through 127.0.0.1.
		"--bind-address", "0.0.0.0",
		"--advertise-address", c.cfg.HostIP,
		"--secure-port", strconv.Itoa(c.cfg.APIServerPort),
		"--etcd-servers", fmt.Sprintf("http://127.0.0.1:%d", c.cfg.EtcdPort),
		"--tls-cert-file", c.pkiFile("apiserver.crt"),
		"--tls-private-key-file", c.pkiFile("apiserver.key"),
		"--client-ca-file", c.pkiFile("ca.crt"),
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", c.pkiFile("sa.pub"),
		"--service-account-signing-key-file", c.pkiFile("sa.key"),
		"--service-cluster-ip-range", c.cfg.ServiceCIDR,
		"--authorization-mode", "Node,RBAC",
		"--enable-admission-plugins", "NodeRestriction",
		"--allow-privileged=true",
		"--kubelet-client-certificate", c.pkiFile("apiserver-kubelet-client.crt"),
		"--kubelet-client-key", c.pkiFile("apiserver-kubelet-client.key"),
		"--kubelet-preferred-address-types", "InternalIP,Hostname",
		"--profiling=false",
		"--feature-gates", c.apiserverFeatureGates(),
		"--v", strconv.Itoa(c.cfg.Verbosity),
	}, nil)
	return err
}

// alphaFeatureGates are the Kubernetes alpha features the local cluster's
// API server and scheduler enable: DRAListTypeAttributes, for the list form
// of numaNode (--numa-node-attribute=list; nodes without it publish the
// scalar form, which the gate does not change).
const alphaFeatureGates = "DRAListTypeAttributes=true"

func (c *Cluster) startKubeComponent(name string, port int, extra ...string) error {
	kc := c.Kubeconfig(name)
	args := []string{c.bin(name), "--kubeconfig", kc,
		"--authentication-kubeconfig", kc, "--authorization-kubeconfig", kc,
		"--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(port),
		"--leader-elect=false", "--profiling=false", "--v", strconv.Itoa(c.cfg.Verbosity)}
	_, err := c.start(name, append(args, extra...), nil)
	return err
}

func (c *Cluster) startControllerManager() error {
	return c.startKubeComponent(controllerManagerName, c.cfg.ControllerManagerPort,
		"--service-account-private-key-file", c.pkiFile("sa.key"),
		"--root-ca-file", c.pkiFile("ca.crt"),
		"--use-service-account-credentials",
		"--cluster-signing-cert-file", c.pkiFile("ca.crt"),
		"--cluster-signing-key-file", c.pkiFile("ca.key"),
		"--service-cluster-ip-range", c.cfg.ServiceCIDR)
}

// startKubeProxy runs one kube-proxy for the whole host: every node shares
// the host's network namespace, so one set of iptables rules serves them all.
func (c *Cluster) startKubeProxy() error {
	cfg := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %s
mode: iptables
clusterCIDR: %s
bindAddress: 0.0.0.0
healthzBindAddress: 127.0.0.1:%d
metricsBindAddress: 127.0.0.1:%d
# Leave the host's conntrack table size alone (the VM may refuse it).
conntrack:
  maxPerCore: 0
  min: 0
`, c.Kubeconfig(kubeProxyName), c.cfg.PodCIDR, c.cfg.KubeProxyHealthzPort, c.cfg.KubeProxyMetricsPort)
	file := filepath.Join(c.Dir, "kube-proxy.yaml")
	if err := os.WriteFile(file, []byte(cfg), 0o644); err != nil {
		return err
	}
	_, err := c.start(kubeProxyName, []string{c.bin("kube-proxy"), "--config", file,
		"--hostname-override", c.cfg.Nodes[0].Name, "--v", strconv.Itoa(c.cfg.Verbosity)}, nil)
	return err
}

// healthClient is the HTTP client of the health endpoints, made once per
// kind: with the admin's client certificate, trusting the cluster CA, or
// insecure for the components' self-signed serving certificates.
func (c *Cluster) healthClient(insecure bool) (*http.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if hc := c.httpClient[insecure]; hc != nil {
		return hc, nil
	}
	tlsCfg := &tls.Config{InsecureSkipVerify: insecure} //nolint:gosec // the components' self-signed health endpoints
	if !insecure {
		ca, err := os.ReadFile(c.pkiFile("ca.crt"))
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(ca)
		tlsCfg.RootCAs = pool
		cert, err := tls.LoadX509KeyPair(c.pkiFile("admin.crt"), c.pkiFile("admin.key"))
		if err != nil {
			return nil, err
		}
		tlsCfg.Certificates = []tls.Certificate{cert}
	}
	if c.httpClient == nil {
		c.httpClient = map[bool]*http.Client{}
	}
	c.httpClient[insecure] = &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	return c.httpClient[insecure], nil
}

// httpGet fetches url through healthClient and returns the body of a 200.
func (c *Cluster) httpGet(ctx context.Context, url string, insecure bool) (string, error) {
	client, err := c.healthClient(insecure)
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return string(body), fmt.Errorf("%s: %s", url, resp.Status)
	}
	return string(body), nil
}

func (c *Cluster) etcdHealthy(ctx context.Context) error {
	body, err := c.httpGet(ctx, fmt.Sprintf("http://127.0.0.1:%d/health", c.cfg.EtcdPort), true)
	if err != nil {
		return err
	}
	if !strings.Contains(body, `"health":"true"`) {
		return fmt.Errorf("etcd: %s", body)
	}
	return nil
}

func (c *Cluster) apiserverReady(ctx context.Context) error {
	_, err := c.httpGet(ctx, c.apiserverURL()+"/readyz", false)
	return err
}

func (c *Cluster) healthz(port int) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.httpGet(ctx, fmt.Sprintf("https://127.0.0.1:%d/healthz", port), true)
		return err
	}
}

// upControlPlane starts etcd, the API server, the scheduler, the
// controller-manager and kube-proxy and waits until each is healthy.
func (c *Cluster) upControlPlane(ctx context.Context) error {
	if err := c.startEtcd(); err != nil {
		return err
	}
	if err := c.waitFor(ctx, "etcd", []string{etcdName}, c.etcdHealthy); err != nil {
		return err
	}
	if err := c.startAPIServer(); err != nil {
		return err
	}
	if err := c.waitFor(ctx, "kube-apiserver /readyz", []string{etcdName, apiserverName}, c.apiserverReady); err != nil {
		return err
	}
	c.logf("kube-apiserver ready on %s (advertised at %s)", c.apiserverURL(), c.cfg.HostIP)
	if err := c.startKubeComponent(schedulerName, c.cfg.SchedulerPort, "--feature-gates", alphaFeatureGates); err != nil {
		return err
	}
	if err := c.startControllerManager(); err != nil {
		return err
	}
	for name, port := range map[string]int{schedulerName: c.cfg.SchedulerPort, controllerManagerName: c.cfg.ControllerManagerPort} {
		if err := c.waitFor(ctx, name+" /healthz", []string{apiserverName, name}, c.healthz(port)); err != nil {
			return err
		}
	}
	c.logf("kube-scheduler and kube-controller-manager healthy")
	return nil
}

// upKubeProxy starts kube-proxy once the first node exists (it takes its
// node IP from that Node) and waits until it has programmed the Services.
func (c *Cluster) upKubeProxy(ctx context.Context) error {
	if err := c.startKubeProxy(); err != nil {
		return err
	}
	proxyHealthz := func(ctx context.Context) error {
		_, err := c.httpGet(ctx, fmt.Sprintf("http://127.0.0.1:%d/healthz", c.cfg.KubeProxyHealthzPort), true)
		return err
	}
	if err := c.waitFor(ctx, "kube-proxy /healthz", []string{kubeProxyName}, proxyHealthz); err != nil {
		return err
	}
	c.logf("kube-proxy healthy: Services reachable from the host and the pods")
	return nil
}
