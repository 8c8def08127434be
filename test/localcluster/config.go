package localcluster

import (
	"net/http"
	"sync"

	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"k8s.io/client-go/kubernetes"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/gpudra/gpudra/internal/shared/compat"
)

// NodeSpec is one simulated GPU node: its name and simulation profile (a
// built-in name such as dgx-h100, or a profile file).
type NodeSpec struct {
	Name    string `json:"name"`
	Profile string `json:"profile"`
	// Slot picks the node's kubelet ports, pod subnet and CNI bridge; `up`
	// numbers its nodes from 0, add-node takes the lowest free slot.
	Slot int `json:"slot"`
	// Labels the kubelet registers the node with (--node-labels).
	Labels map[string]string `json:"labels,omitempty"`
	// Layout names the node's driver installation (DriverLayouts); "" is
	// host.
	Layout string `json:"layout,omitempty"`
	// Runtime is the node's container runtime (Runtimes); "" is containerd.
	Runtime string `json:"runtime,omitempty"`
}

// Config of a cluster. `up` records it in cluster.json; later commands act
// on the cluster that runs, whatever their flags say.
type Config struct {
	// Dir holds everything of the cluster (Layout).
	Dir string `json:"dir"`
	// RepoRoot is the gpudra checkout: the chart, the images, the binaries.
	RepoRoot string `json:"repoRoot"`
	// BinDir holds the Kubernetes, containerd and gpudra binaries.
	BinDir string `json:"binDir"`
	// ImagesDir holds the OCI image tarballs (make images).
	ImagesDir string `json:"imagesDir"`
	// Helm is the helm binary; SimNVMLLibrary the simulated libnvidia-ml;
	// SimFMLibrary the simulated libnvfm, which the driver roots of nodes
	// whose profile runs Fabric Manager hold.
	Helm           string `json:"helm"`
	SimNVMLLibrary string `json:"simNVMLLibrary"`
	SimFMLibrary   string `json:"simFMLibrary"`
	// Runc and CNIBinDir come from Debian's runc and containernetworking-plugins.
	Runc      string `json:"runc"`
	CNIBinDir string `json:"cniBinDir"`
	// Conmon, Debian's, monitors the containers of CRI-O nodes.
	Conmon string `json:"conmon"`

	Nodes []NodeSpec `json:"nodes"`
	// HostIP is every node's InternalIP and the API server's advertise
	// address: pods reach the API server there through the kubernetes Service.
	HostIP      string `json:"hostIP"`
	ServiceCIDR string `json:"serviceCIDR"`
	// PodCIDR is split into one /24 per node, in node order.
	PodCIDR string `json:"podCIDR"`

	EtcdPort, EtcdPeerPort, APIServerPort, SchedulerPort, ControllerManagerPort int
	// KubeletPort and KubeletHealthzPort are the first node's; +1 per node.
	KubeletPort, KubeletHealthzPort            int
	KubeProxyHealthzPort, KubeProxyMetricsPort int

	// Release and Namespace of the Helm installation; Values are extra
	// `--set` values (key=value) on top of values-simulated.yaml.
	Release   string   `json:"release"`
	Namespace string   `json:"namespace"`
	Values    []string `json:"values"`
	// NodeGroups are the chart's kubeletPlugin.nodeGroups: nodes with
	// plugin settings of their own (add-node with plugin flags).
	NodeGroups []NodeGroup `json:"nodeGroups,omitempty"`

	// APIServerOnly, when set, is the kube-apiserver binary of a cluster of
	// etcd and that API server only (apiserveronly.go); FeatureGates are
	// then its --feature-gates.
	APIServerOnly string `json:"apiServerOnly,omitempty"`
	FeatureGates  string `json:"featureGates,omitempty"`

	Verbosity   int           `json:"verbosity"`
	WaitTimeout time.Duration `json:"waitTimeout"`
	StopTimeout time.Duration `json:"stopTimeout"`
}

// DefaultConfig is the two-node cluster of make cluster-up and the e2e
// suite: gpu-h100 (a DGX H100) and gpu-mixed (two L4s, two A100s).
func DefaultConfig(repoRoot string) Config {
	out := filepath.Join(repoRoot, "_output")
	return Config{
		Dir:            filepath.Join(out, "localcluster"),
		RepoRoot:       repoRoot,
		BinDir:         filepath.Join(out, "bin"),
		ImagesDir:      filepath.Join(out, "images"),
		Helm:           filepath.Join(out, "tools", "helm"),
		SimNVMLLibrary: filepath.Join(out, "lib", "libnvidia-ml-sim.so"),
		SimFMLibrary:   filepath.Join(out, "lib", "libnvfm-sim.so"),
		Runc:           "/usr/sbin/runc",
		CNIBinDir:      "/usr/lib/cni",
		Conmon:         "/usr/bin/conmon",
		Nodes:          []NodeSpec{{Name: "gpu-h100", Profile: "dgx-h100"}, {Name: "gpu-mixed", Profile: "mixed", Slot: 1}},
		ServiceCIDR:    "10.96.0.0/24",
		PodCIDR:        "10.244.0.0/16",
		EtcdPort:       24379, EtcdPeerPort: 24380, APIServerPort: 27443,
		SchedulerPort: 31259, ControllerManagerPort: 31257,
		KubeletPort: 31250, KubeletHealthzPort: 31280,
		KubeProxyHealthzPort: 31256, KubeProxyMetricsPort: 31249,
		Release: "gpudra", Namespace: "gpudra-system",
		Values:      []string{"kubeletPlugin.mig=dynamic"},
		Verbosity:   2,
		WaitTimeout: 120 * time.Second,
		StopTimeout: 10 * time.Second,
	}
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// ParseNodes parses "name=profile name=profile ...".
func ParseNodes(s string) ([]NodeSpec, error) {
	var nodes []NodeSpec
	for _, f := range strings.Fields(s) {
		name, profile, ok := strings.Cut(f, "=")
		if !ok || profile == "" || !dnsLabel.MatchString(name) {
			return nil, fmt.Errorf("node %q: want NAME=PROFILE with NAME a DNS label", f)
		}
		nodes = append(nodes, NodeSpec{Name: name, Profile: profile})
	}
	if len(nodes) == 0 {
		return nil, errors.New("no nodes given")
	}
	if len(nodes) > 200 {
		return nil, errors.New("at most 200 nodes (one /24 pod subnet each)")
	}
	return nodes, nil
}

func (c *Config) complete() error {
	if c.HostIP == "" {
		ip, err := defaultRouteIP()
		if err != nil {
			return fmt.Errorf("find the host IP (set it explicitly): %w", err)
		}
		c.HostIP = ip
	}
	if net.ParseIP(c.HostIP) == nil || net.ParseIP(c.HostIP).IsLoopback() {
		return fmt.Errorf("host IP %q: pods reach the API server there, it must be a non-loopback address", c.HostIP)
	}
	if _, _, err := net.ParseCIDR(c.PodCIDR); err != nil {
		return fmt.Errorf("pod CIDR: %w", err)
	}
	if len(c.Nodes) == 0 && c.APIServerOnly == "" {
		return errors.New("no nodes")
	}
	for i := range c.Nodes {
		c.Nodes[i].Slot = i
		if _, err := nodeRuntime(c.Nodes[i].Runtime); err != nil {
			return fmt.Errorf("node %s: %w", c.Nodes[i].Name, err)
		}
	}
	return nil
}

// defaultRouteIP is the source address of the default route.
func defaultRouteIP() (string, error) {
	conn, err := net.Dial("udp", "192.0.2.1:9") // no packet is sent
	if err != nil {
		return "", err
	}
	defer func() { _ = conn.Close() }()
	return conn.LocalAddr().(*net.UDPAddr).IP.String(), nil
}

func (c *Config) save() error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(Layout{c.Dir}.ConfigFile(), b, 0o644)
}

// LoadConfig reads the configuration a running cluster recorded in dir.
func LoadConfig(dir string) (Config, error) {
	var c Config
	b, err := os.ReadFile(Layout{dir}.ConfigFile())
	if err != nil {
		return c, fmt.Errorf("no cluster in %s (run `make cluster-up`): %w", dir, err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("read %s: %w", Layout{dir}.ConfigFile(), err)
	}
	return c, nil
}

// Cluster is a local cluster: its configuration and layout.
type Cluster struct {
	Layout
	cfg    Config
	out    io.Writer
	start0 time.Time

	// The clients of the API server and of the components' health
	// endpoints, made on first use (the PKI must exist) and kept: the
	// readiness waits poll them several times a second.
	mu         sync.Mutex
	client     kubernetes.Interface
	httpClient map[bool]*http.Client // by insecure
	// names of the driver the last InstallDriver installed (its
	// compatibility value); nil: those of cfg.Values.
	names *compat.Names
}

// New returns the cluster of cfg; progress goes to out.
func New(cfg Config, out io.Writer) *Cluster {
	return &Cluster{Layout: Layout{cfg.Dir}, cfg: cfg, out: out, start0: time.Now()}
}

// Open returns the cluster recorded in dir.
func Open(dir string, out io.Writer) (*Cluster, error) {
	cfg, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	return New(cfg, out), nil
}

// Config is the cluster's configuration, as last recorded (see refresh).
func (c *Cluster) Config() Config {
	_ = c.refresh()
	return c.cfg
}

// refresh reads the nodes and node groups again from the cluster's record:
// another process (the gpudra-cluster CLI a notebook runs, while the e2e
// suite holds its own Cluster) may have added or removed nodes since this
// Cluster read or wrote it. With a stale list a node added here took the
// slot, and so the kubelet port, of a node the CLI had added, and a helm
// upgrade from here dropped that node's group. No record yet (before Up
// writes it) leaves the configuration as it is.
func (c *Cluster) refresh() error {
	rec, err := LoadConfig(c.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	c.cfg.Nodes, c.cfg.NodeGroups = rec.Nodes, rec.NodeGroups
	return nil
}

func (c *Cluster) logf(format string, args ...any) {
	_, _ = fmt.Fprintf(c.out, "[%6.1fs] %s\n", time.Since(c.start0).Seconds(), fmt.Sprintf(format, args...))
}

func (c *Cluster) bin(name string) string { return filepath.Join(c.cfg.BinDir, name) }

func (c *Cluster) apiserverURL() string {
	return fmt.Sprintf("https://127.0.0.1:%d", c.cfg.APIServerPort)
}

// nodeIndex is a node's slot: it picks its ports and pod subnet.
func (c *Cluster) nodeIndex(name string) (int, error) {
	for _, n := range c.cfg.Nodes {
		if n.Name == name {
			return n.Slot, nil
		}
	}
	var names []string
	for _, n := range c.cfg.Nodes {
		names = append(names, n.Name)
	}
	return 0, fmt.Errorf("unknown node %q (nodes: %s)", name, strings.Join(names, ", "))
}

// podSubnet is node i's /24 of the pod CIDR.
func (c *Cluster) podSubnet(i int) string {
	_, n, _ := net.ParseCIDR(c.cfg.PodCIDR)
	ip := n.IP.To4()
	return fmt.Sprintf("%d.%d.%d.0/24", ip[0], ip[1], int(ip[2])+i)
}
