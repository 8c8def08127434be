// Package localcluster runs a real Kubernetes cluster on one Linux host for
// gpudra's demo and end-to-end tests, in the shape production has below the
// kubelet: every simulated GPU node runs its own containerd with runc, CNI
// bridge networking and CDI, the driver is installed with `helm install` of
// deployments/helm/gpudra, and the plugin runs as a DaemonSet pod on a
// simulated driver root (test/fakedriver) through the real NVML code path.
//
// A node is a persistent mount namespace in which the node's own directories
// are bind-mounted onto the standard paths (/var/lib/kubelet,
// /var/lib/containerd, /run/containerd, /var/run/cdi, /etc/cni/net.d, the
// simulated driver root, ...): the node's containerd and kubelet run in it,
// so one chart with its default host paths serves every node. All nodes share
// the host's network namespace; each node has its own CNI bridge and pod
// subnet, and one kube-proxy on the host programs the Services.
//
// This file is the one place that knows the cluster's directory layout.
package localcluster

import (
	"fmt"
	"path/filepath"
	"strings"
)

// Layout is the cluster's directory layout under Dir.
type Layout struct{ Dir string }

func (l Layout) ConfigFile() string      { return filepath.Join(l.Dir, "cluster.json") }
func (l Layout) PKIDir() string          { return filepath.Join(l.Dir, "pki") }
func (l Layout) KubeconfigDir() string   { return filepath.Join(l.Dir, "kubeconfig") }
func (l Layout) AdminKubeconfig() string { return l.Kubeconfig("admin") }
func (l Layout) LogDir() string          { return filepath.Join(l.Dir, "logs") }
func (l Layout) PIDDir() string          { return filepath.Join(l.Dir, "pids") }
func (l Layout) EtcdDir() string         { return filepath.Join(l.Dir, "etcd") }
func (l Layout) NodesDir() string        { return filepath.Join(l.Dir, "nodes") }

// NodeGroupsValues is the Helm values file with the chart's
// kubeletPlugin.nodeGroups of the nodes added with plugin flags of their own.
func (l Layout) NodeGroupsValues() string { return filepath.Join(l.Dir, "node-groups.yaml") }

// Kubeconfig is the kubeconfig of a client identity (admin, kube-scheduler,
// node-<name>, ...).
func (l Layout) Kubeconfig(name string) string {
	return filepath.Join(l.KubeconfigDir(), name+".kubeconfig")
}

func (l Layout) Log(component string) string { return filepath.Join(l.LogDir(), component+".log") }
func (l Layout) PIDFile(component string) string {
	return filepath.Join(l.PIDDir(), component+".pid")
}

// Node is the layout of one node's directory.
func (l Layout) Node(name string) NodeLayout {
	return NodeLayout{Name: name, Dir: filepath.Join(l.NodesDir(), name)}
}

// NodeLayout is a node's directory: its mount namespace, its configuration
// files and the host directories bind-mounted onto the node's standard paths.
type NodeLayout struct {
	Name string
	Dir  string
}

// NamespaceDir holds the bind mount of the node's mount namespace; it is a
// private mount so that the namespace file can be bind-mounted there.
func (n NodeLayout) NamespaceDir() string     { return filepath.Join(n.Dir, "ns") }
func (n NodeLayout) MountNamespace() string   { return filepath.Join(n.NamespaceDir(), "mnt") }
func (n NodeLayout) ContainerdConfig() string { return filepath.Join(n.Dir, "containerd.toml") }
func (n NodeLayout) KubeletConfig() string    { return filepath.Join(n.Dir, "kubelet-config.yaml") }

// DriverRoot is the node's simulated NVIDIA driver installation on the host,
// mounted in the node at SimDriverRoot.
func (n NodeLayout) DriverRoot() string { return filepath.Join(n.Dir, "driver-root") }

// HostPath is the host directory bind-mounted at nodePath in the node.
func (n NodeLayout) HostPath(nodePath string) string {
	return filepath.Join(n.Dir, "fs", filepath.FromSlash(nodePath))
}

// HostPathOf is where a path of the node's file system (as its kubelet,
// containerd and pods see it) is on the host: under the driver root or one
// of the node's own directories (nodeBinds), else the host's own path.
func (n NodeLayout) HostPathOf(nodePath string) string {
	clean := filepath.Clean(nodePath)
	for _, l := range DriverLayouts {
		if rest, ok := cutPath(clean, l.NodePath); ok {
			return filepath.Join(n.DriverRoot(), rest)
		}
	}
	for _, b := range nodeBinds {
		if rest, ok := cutPath(clean, b); ok {
			return filepath.Join(n.HostPath(b), rest)
		}
	}
	return clean
}

// cutPath cuts the directory dir off path (path itself or below it).
func cutPath(path, dir string) (string, bool) {
	if path == dir {
		return "", true
	}
	rest, ok := strings.CutPrefix(path, dir+"/")
	return rest, ok
}

// Paths inside a node (its mount namespace). The chart's defaults
// (cdiRoot, kubeletRoot) and values-simulated.yaml (nvidiaDriverRoot) name
// the same paths; TestNodePathsAreTheChartValues checks that.
const (
	ContainerdSocket = "/run/containerd/containerd.sock"
	CNIConfDir       = "/etc/cni/net.d"
	CDIDir           = "/var/run/cdi"
	KubeletRoot      = "/var/lib/kubelet"
	SimDriverRoot    = "/var/lib/gpudra-sim/driver-root"
)

// DriverLayout is a driver installation a node can have: where the node
// sees its driver root, the fake root's layout (test/fakedriver Layouts),
// and the chart value that installs the plugin for it.
type DriverLayout struct {
	Name string
	// NodePath is the driver root as the node (and the chart's
	// nvidiaDriverRoot) names it.
	NodePath string
	// Fake is the fakedriver layout of the simulated root.
	Fake string
}

// DriverLayouts are the driver installations of simulated nodes:
//   - host: a driver on the host. Its root would be /, which a simulated
//     node cannot replace on a shared machine: the root is at SimDriverRoot
//     instead, in the same layout (values-simulated.yaml's nvidiaDriverRoot).
//   - operator: the GPU Operator's driver container, /run/nvidia/driver.
//   - gke: GKE's /home/kubernetes/bin/nvidia (lib64, bin).
var DriverLayouts = map[string]DriverLayout{
	"host":     {Name: "host", NodePath: SimDriverRoot, Fake: "host"},
	"operator": {Name: "operator", NodePath: "/run/nvidia/driver", Fake: "host"},
	"gke":      {Name: "gke", NodePath: "/home/kubernetes/bin/nvidia", Fake: "gke"},
}

// driverLayout is a node's layout ("" is host).
func driverLayout(name string) (DriverLayout, error) {
	if name == "" {
		name = "host"
	}
	l, ok := DriverLayouts[name]
	if !ok {
		return l, fmt.Errorf("unknown driver layout %q: want host, operator or gke", name)
	}
	return l, nil
}

// nodeBinds are the node paths that get a directory of their own per node
// (under <node>/fs), so that every node looks like a standard host: the
// kubelet hard-codes some of them, the chart's hostPath volumes name others.
var nodeBinds = []string{
	KubeletRoot,
	"/var/log/pods",
	"/var/log/containers",
	"/var/lib/containerd",
	"/run/containerd",
	CDIDir,
	"/etc/cdi",
	CNIConfDir,
	"/var/lib/cni",
	// CRI-O's (crio.go); empty on a containerd node.
	"/run/crio",
	"/var/lib/crio",
	"/var/lib/containers",
	"/run/containers",
}

// CgroupParent is the cgroup (in every v1 hierarchy) of a node's processes:
// containerd, the shims and the kubelet in <parent>/system, the pods in
// <parent>/pods (the kubelet's cgroupRoot).
func CgroupParent(clusterName, node string) string {
	return fmt.Sprintf("/%s/%s", clusterName, node)
}
