package localcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpudra/gpudra/test/fakedriver"
	"github.com/gpudra/gpudra/test/images"
)

func kubeletName(node string) string { return "kubelet-" + node }

func (c *Cluster) nodeComponents() []string {
	var out []string
	for _, n := range c.cfg.Nodes {
		out = append(out, SimKernelName(n.Name), c.runtimeName(n.Name), kubeletName(n.Name))
	}
	return out
}

// nsenter prefixes argv with entering the node's mount namespace.
func (c *Cluster) nsenter(node string, argv ...string) []string {
	return append([]string{"nsenter", "--mount=" + c.Node(node).MountNamespace(), "--"}, argv...)
}

// prepareNode writes the node's simulated driver root, starts its simulated
// kernel (simkernel.go) and creates its mount namespace with the node's
// directories bound onto the standard paths.
func (c *Cluster) prepareNode(ctx context.Context, spec NodeSpec) error {
	n := c.Node(spec.Name)
	for _, p := range nodeBinds {
		if err := os.MkdirAll(n.HostPath(p), 0o755); err != nil {
			return err
		}
	}
	layout, err := driverLayout(spec.Layout)
	if err != nil {
		return fmt.Errorf("node %s: %w", spec.Name, err)
	}
	if err := fakedriver.Generate(fakedriver.Options{Dir: n.DriverRoot(), Profile: spec.Profile, Node: spec.Name,
		NVMLLibrary: c.cfg.SimNVMLLibrary, FMLibrary: c.cfg.SimFMLibrary, ToolsDir: c.cfg.BinDir, Layout: layout.Fake}); err != nil {
		return fmt.Errorf("node %s: %w", spec.Name, err)
	}
	if err := c.createMountNamespace(ctx, n); err != nil {
		return fmt.Errorf("node %s: mount namespace: %w", spec.Name, err)
	}
	if err := c.makeCgroups(spec.Name); err != nil {
		return err
	}
	if err := c.startSimKernel(spec.Name); err != nil {
		return err
	}
	bind := func(source, target string) error {
		if err := c.ensureHostDir(target); err != nil {
			return err
		}
		if _, err := run(ctx, c.nsenter(spec.Name, "mount", "--bind", source, target)...); err != nil {
			return fmt.Errorf("node %s: %w", spec.Name, err)
		}
		return nil
	}
	for _, p := range nodeBinds {
		if err := bind(n.HostPath(p), p); err != nil {
			return err
		}
	}
	if err := bind(n.DriverRoot(), layout.NodePath); err != nil {
		return err
	}
	// Shared, like a host's mounts under systemd: pods may mount the driver
	// root with HostToContainer propagation (the MPS daemon Pods do), which
	// the runtime refuses for a private mount.
	if _, err := run(ctx, c.nsenter(spec.Name, "mount", "--make-shared", layout.NodePath)...); err != nil {
		return fmt.Errorf("node %s: %w", spec.Name, err)
	}
	return nil
}

// createMountNamespace makes a persistent mount namespace: unshare binds it
// onto a file in a private mount (a namespace file cannot be bound into a
// shared one), and each of the node's processes enters it with nsenter.
func (c *Cluster) createMountNamespace(ctx context.Context, n NodeLayout) error {
	dir := n.NamespaceDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if _, err := run(ctx, "mount", "--bind", dir, dir); err != nil {
		return err
	}
	if _, err := run(ctx, "mount", "--make-private", dir); err != nil {
		return err
	}
	if err := os.WriteFile(n.MountNamespace(), nil, 0o644); err != nil {
		return err
	}
	_, err := run(ctx, "unshare", "--mount="+n.MountNamespace(), "--propagation", "private", "true")
	return err
}

// ensureHostDir creates a node's mount point on the host if it is missing,
// recording it so that `down` removes it again.
func (c *Cluster) ensureHostDir(path string) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	// The first missing ancestor is what we create; record it.
	first := path
	for p := path; p != "/"; p = filepath.Dir(p) {
		if _, err := os.Stat(p); err == nil {
			break
		}
		first = p
	}
	if err := os.MkdirAll(path, 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(c.Dir, "host-dirs"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = fmt.Fprintln(f, first)
	return err
}

// containerdConfig is the node's containerd configuration (version 3).
func (c *Cluster) containerdConfig(n NodeLayout) string {
	return fmt.Sprintf(`version = 3
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
  address = %[1]q

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %[2]q

[plugins.'io.containerd.cri.v1.runtime']
  # The VM lacks CAP_SYS_RESOURCE: an oom_score_adj below containerd's own
  # makes runc fail ("can't get final child's PID from pipe").
  restrict_oom_score_adj = true
  # Network namespaces under the node's /run/containerd, not the host's /run/netns.
  netns_mounts_under_state_dir = true
  cdi_spec_dirs = [%[3]q, "/etc/cdi"]
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = %[4]q
        Root = "/run/containerd/runc"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%[5]q]
    conf_dir = %[6]q

# NRI: containerd starts the plugins of plugin_path (gpudra-sim-nri, see nri.go).
[plugins.'io.containerd.nri.v1.nri']
  disable = false
  socket_path = %[7]q
  plugin_path = %[8]q
`, ContainerdSocket, images.PauseImage, CDIDir, c.cfg.Runc, c.cfg.CNIBinDir, CNIConfDir, NRISocket, n.nriPluginDir())
}

// cniConfig gives node i a bridge of its own with its /24 of the pod CIDR.
// Every bridge is in the host's network namespace, so pods reach each
// other, the host and (through kube-proxy's rules) the Services.
func (c *Cluster) cniConfig(node string, i int) string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "gpudra-%s",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "gpudra%d",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, node, i, c.podSubnet(i))
}

func (c *Cluster) kubeletConfig(node string, i int) string {
	socket := RuntimeSocket(c.runtimeOf(node))
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://%[1]s
imageServiceEndpoint: unix://%[1]s
address: %[2]s
port: %[3]d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %[4]d
# cgroup v1 host: accepted explicitly; the node's pods live under its own
# cgroup root in every hierarchy.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %[5]s
cgroupsPerQOS: true
failSwapOn: false
# No disk or memory pressure evictions on a shared development host.
evictionHard: {}
# No image garbage collection: the images come from no registry (imported at
# start), so an image the kubelet deleted could never be pulled again. With
# the kubelet's default (85%%) a host disk filling up during a run removed the
# workload image between two pods ("trying and failing to pull image").
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# Pods get no cluster DNS (there is none); Services are reached by ClusterIP.
resolvConf: ""
serializeImagePulls: false
# THROW-AWAY TEST CLUSTER ONLY: any client with a certificate of the cluster
# CA (the API server for logs/exec) may do anything here.
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
  x509:
    clientCAFile: %[6]s
authorization:
  mode: AlwaysAllow
`, socket, c.cfg.HostIP, c.cfg.KubeletPort+i, c.cfg.KubeletHealthzPort+i,
		CgroupParent(c.clusterName(), node)+"/pods", c.pkiFile("ca.crt"))
}

// clusterName names the cluster's cgroups: the base name of its dir.
func (c *Cluster) clusterName() string { return "gpudra-" + filepath.Base(c.Dir) }

// writeNodeRuntimeFiles writes what every runtime of a node reads: its NRI
// plugin directory and its CNI configuration.
func (c *Cluster) writeNodeRuntimeFiles(spec NodeSpec) error {
	i, err := c.nodeIndex(spec.Name)
	if err != nil {
		return err
	}
	if err := c.writeNRIPlugins(spec); err != nil {
		return err
	}
	cni := filepath.Join(c.Node(spec.Name).HostPath(CNIConfDir), "10-gpudra.conflist")
	return os.WriteFile(cni, []byte(c.cniConfig(spec.Name, i)), 0o644)
}

// startContainerd starts the node's containerd and imports the images.
func (c *Cluster) startContainerd(ctx context.Context, spec NodeSpec) error {
	n := c.Node(spec.Name)
	if err := c.writeNodeRuntimeFiles(spec); err != nil {
		return err
	}
	if err := os.WriteFile(n.ContainerdConfig(), []byte(c.containerdConfig(n)), 0o644); err != nil {
		return err
	}
	name := c.runtimeName(spec.Name)
	pid, err := c.start(name, c.nsenter(spec.Name, c.bin("containerd"), "--config", n.ContainerdConfig()),
		[]string{"PATH=" + c.cfg.BinDir + ":" + os.Getenv("PATH")})
	if err != nil {
		return err
	}
	if err := c.joinCgroup(spec.Name, "system", pid); err != nil {
		return err
	}
	sock := c.hostSocket(spec.Name)
	if err := c.waitFor(ctx, "containerd of "+spec.Name, []string{name}, func(context.Context) error {
		return dialUnix(sock)
	}); err != nil {
		return err
	}
	return c.importImages(ctx, spec.Name)
}

func dialUnix(path string) error {
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return err
	}
	return conn.Close()
}

// importImages imports every OCI tarball of the images dir (make images)
// into the node's runtime.
func (c *Cluster) importImages(ctx context.Context, node string) error {
	tars, _ := filepath.Glob(filepath.Join(c.cfg.ImagesDir, "*.tar"))
	if len(tars) == 0 {
		return fmt.Errorf("no images in %s: run `make images`", c.cfg.ImagesDir)
	}
	for _, tar := range tars {
		if err := c.importImage(ctx, node, tar); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) startKubelet(spec NodeSpec) error {
	n := c.Node(spec.Name)
	i, err := c.nodeIndex(spec.Name)
	if err != nil {
		return err
	}
	if err := os.WriteFile(n.KubeletConfig(), []byte(c.kubeletConfig(spec.Name, i)), 0o644); err != nil {
		return err
	}
	argv := c.nsenter(spec.Name, c.bin("kubelet"),
		"--config", n.KubeletConfig(),
		"--kubeconfig", c.Kubeconfig("node-"+spec.Name),
		"--hostname-override", spec.Name,
		"--node-ip", c.cfg.HostIP,
		"--v", strconv.Itoa(c.cfg.Verbosity))
	if labels := nodeLabelsFlag(spec.Labels); labels != "" {
		argv = append(argv, "--node-labels", labels)
	}
	pid, err := c.start(kubeletName(spec.Name), argv, nil)
	if err != nil {
		return err
	}
	return c.joinCgroup(spec.Name, "system", pid)
}

// stopNode stops the kubelet, then every process in the node's cgroups
// (pods, shims or conmons, the runtime, the simulated kernel), and removes
// its mount namespace.
func (c *Cluster) stopNode(ctx context.Context, node string) error {
	c.stop(kubeletName(node))
	c.stop(c.runtimeName(node))
	c.stop(SimKernelName(node))
	var errs []error
	if err := c.killCgroups(node); err != nil {
		errs = append(errs, err)
	}
	ns := c.Node(node).MountNamespace()
	if isMountPoint(ns) {
		if _, err := run(ctx, "umount", ns); err != nil {
			errs = append(errs, err)
		}
	}
	if d := c.Node(node).NamespaceDir(); isMountPoint(d) {
		if _, err := run(ctx, "umount", d); err != nil {
			errs = append(errs, err)
		}
	}
	if i, err := c.nodeIndex(node); err == nil {
		_, _ = run(ctx, "ip", "link", "delete", fmt.Sprintf("gpudra%d", i))
	}
	return errors.Join(errs...)
}

// isMountPoint tells whether path is a mount point in our mount namespace.
func isMountPoint(path string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && f[4] == path {
			return true
		}
	}
	return false
}
