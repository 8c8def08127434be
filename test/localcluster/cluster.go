package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

func (c *Cluster) allComponents() []string {
	return append(c.controlPlane(), c.nodeComponents()...)
}

// Running reports how many of the cluster's components run, of how many.
func (c *Cluster) Running() (up, total int) {
	for _, name := range c.allComponents() {
		total++
		if c.pid(name) != 0 {
			up++
		}
	}
	return up, total
}

// preflight checks what `up` needs before anything starts: root, the host
// packages of hack/prereqs.txt (which hack/prereqs.sh installs), the files the
// cluster's config names, and what make builds.
func (c *Cluster) preflight() error {
	if os.Geteuid() != 0 {
		return errors.New("must run as root: the nodes mount, create cgroups and run containers")
	}
	var errs []error
	pkgs, err := missingHostPackages(c.cfg.RepoRoot)
	if err != nil {
		return fmt.Errorf("host prerequisites: %w", err)
	}
	if len(pkgs) > 0 {
		errs = append(errs, fmt.Errorf("missing host packages: %s; install them with `hack/prereqs.sh cluster` as root "+
			"(make cluster-up, make demo and make test run it first)", strings.Join(pkgs, ", ")))
	}
	// Runc and CNIBinDir may be set elsewhere than hack/prereqs.txt's
	// Debian paths; the list covers the defaults.
	var other []string
	for _, f := range []string{c.cfg.Runc, filepath.Join(c.cfg.CNIBinDir, "bridge"),
		filepath.Join(c.cfg.CNIBinDir, "host-local"), filepath.Join(c.cfg.CNIBinDir, "portmap")} {
		if !fileExists(f) && !slices.ContainsFunc(pkgs, func(p string) bool { return strings.HasSuffix(p, "("+f+")") }) {
			other = append(other, f)
		}
	}
	if len(other) > 0 {
		errs = append(errs, fmt.Errorf("missing (the cluster's config names them: runc, cniBinDir): %s", strings.Join(other, ", ")))
	}
	var built []string
	for _, b := range []string{"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubelet",
		"kube-proxy", "kubectl", "containerd", "containerd-shim-runc-v2", "ctr",
		"gpudra-fake-nvidia-smi", "gpudra-fake-mps-control", "gpudra-fake-imex", "gpudra-fake-imex-ctl", simNRIBinary, simKernelBinary} {
		if !fileExists(c.bin(b)) {
			built = append(built, c.bin(b))
		}
	}
	for _, f := range []string{c.cfg.Helm, c.cfg.SimNVMLLibrary, c.cfg.SimFMLibrary} {
		if !fileExists(f) {
			built = append(built, f)
		}
	}
	if len(built) > 0 {
		errs = append(errs, fmt.Errorf("not built (`make cluster-up` builds them, then starts the cluster): %s", strings.Join(built, ", ")))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	_, err = cgroupHierarchies()
	return err
}

// Up starts the cluster and installs the driver; a running cluster is left
// as it is.
func (c *Cluster) Up(ctx context.Context) error {
	if err := c.cfg.complete(); err != nil {
		return err
	}
	if _, err := os.Stat(c.ConfigFile()); err == nil {
		if running, err := Open(c.Dir, c.out); err == nil {
			switch up, total := running.Running(); {
			case up == total && running.apiserverReady(ctx) == nil:
				c.logf("cluster already running in %s", c.Dir)
				return nil
			case up > 0:
				return fmt.Errorf("the cluster in %s is partially running (%d of %d components): run `down` first", c.Dir, up, total)
			}
			c.logf("removing the leftovers of a stopped cluster in %s", c.Dir)
			if err := running.Down(ctx); err != nil {
				return err
			}
		}
	}
	if c.cfg.APIServerOnly != "" {
		return c.upAPIServerOnly(ctx)
	}
	if err := c.preflight(); err != nil {
		return err
	}
	for _, d := range []string{c.LogDir(), c.PIDDir(), c.NodesDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := c.cfg.save(); err != nil {
		return err
	}
	c.logf("starting a cluster in %s (host IP %s, nodes: %s)", c.Dir, c.cfg.HostIP, c.nodeList())
	if err := c.up(ctx); err != nil {
		return errors.Join(err, c.keepLogs())
	}
	c.logf("cluster ready: export KUBECONFIG=%s", c.AdminKubeconfig())
	return nil
}

func (c *Cluster) nodeList() string {
	var s []string
	for _, n := range c.cfg.Nodes {
		s = append(s, n.Name+"="+n.Profile)
	}
	return strings.Join(s, " ")
}

func (c *Cluster) up(ctx context.Context) error {
	if err := c.saveSysctls(); err != nil {
		return err
	}
	if err := c.makePKI(); err != nil {
		return fmt.Errorf("PKI: %w", err)
	}
	if err := c.upControlPlane(ctx); err != nil {
		return err
	}
	for _, n := range c.cfg.Nodes {
		if err := c.prepareNode(ctx, n); err != nil {
			return err
		}
		if err := c.startNodeRuntime(ctx, n); err != nil {
			return err
		}
		if err := c.startKubelet(n); err != nil {
			return err
		}
	}
	c.logf("nodes: runtimes up, images imported, kubelets starting")
	cs, err := c.Client()
	if err != nil {
		return err
	}
	for _, n := range c.cfg.Nodes {
		if err := c.waitFor(ctx, "node "+n.Name+" to register", []string{kubeletName(n.Name)}, func(ctx context.Context) error {
			_, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			return err
		}); err != nil {
			return err
		}
	}
	if err := c.upKubeProxy(ctx); err != nil {
		return err
	}
	for _, n := range c.cfg.Nodes {
		if err := c.waitFor(ctx, "node "+n.Name+" Ready", []string{kubeletName(n.Name), c.runtimeName(n.Name)}, func(ctx context.Context) error {
			return nodeReady(ctx, cs, n.Name)
		}); err != nil {
			return err
		}
	}
	c.logf("nodes Ready: %s", c.nodeList())
	return c.InstallDriver(ctx)
}

func nodeReady(ctx context.Context, cs kubernetes.Interface, name string) error {
	node, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, t := range node.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady {
			return fmt.Errorf("node %s still has the taint %s", name, t.Key)
		}
	}
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			if cond.Status == corev1.ConditionTrue {
				return nil
			}
			return fmt.Errorf("node %s not Ready: %s", name, cond.Message)
		}
	}
	return fmt.Errorf("node %s has no Ready condition yet", name)
}

// Down stops every process of the cluster (nodes first, etcd last), removes
// the nodes' mount namespaces, cgroups, bridges and kube-proxy's rules, puts
// back what the kubelets changed on the host and removes the cluster dir.
func (c *Cluster) Down(ctx context.Context) error {
	// Whatever another process added or removed since: a record that
	// cannot be read leaves the nodes this Cluster knows.
	_ = c.refresh()
	var errs []error
	for i := len(c.cfg.Nodes) - 1; i >= 0; i-- {
		if err := c.stopNode(ctx, c.cfg.Nodes[i].Name); err != nil {
			errs = append(errs, err)
		}
	}
	for _, name := range slices.Backward(c.controlPlane()) {
		c.stop(name)
	}
	if _, err := os.Stat(c.bin("kube-proxy")); err == nil && c.cfg.APIServerOnly == "" {
		// Remove the Service rules; harmless when there are none.
		_, _ = run(ctx, c.bin("kube-proxy"), "--cleanup")
	}
	if err := c.restoreSysctls(); err != nil {
		errs = append(errs, err)
	}
	if err := c.removeHostDirs(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("cluster %s not completely removed: %w", c.Dir, errors.Join(errs...))
	}
	if err := os.RemoveAll(c.Dir); err != nil {
		return fmt.Errorf("remove %s: %w", c.Dir, err)
	}
	c.logf("cluster in %s stopped and removed", c.Dir)
	return nil
}

// removeHostDirs removes the mount points `up` created on the host.
func (c *Cluster) removeHostDirs() error {
	b, err := os.ReadFile(filepath.Join(c.Dir, "host-dirs"))
	if err != nil {
		return nil
	}
	var errs []error
	lines := strings.Fields(string(b))
	slices.Sort(lines)
	for _, d := range slices.Backward(slices.Compact(lines)) {
		// Only empty directory trees: nothing of the host's is removed.
		if err := removeEmptyTree(d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func removeEmptyTree(dir string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return fmt.Errorf("%s is not empty (%s), left in place", dir, p)
		}
		dirs = append(dirs, p)
		return nil
	})
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	for _, d := range slices.Backward(dirs) {
		if err := os.Remove(d); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return nil
}

// keepLogs copies the logs of a failed `up` next to the cluster dir.
func (c *Cluster) keepLogs() error {
	dst := c.Dir + "-logs"
	_ = os.RemoveAll(dst)
	if _, err := run(context.Background(), "cp", "-r", c.LogDir(), dst); err != nil {
		return err
	}
	c.logf("logs kept in %s", dst)
	return nil
}

// Status prints each component's state; it fails unless all run.
func (c *Cluster) Status(ctx context.Context) error {
	down := 0
	for _, name := range c.allComponents() {
		if pid := c.pid(name); pid != 0 {
			_, _ = fmt.Fprintf(c.out, "%-34s running (pid %d)\n", name, pid)
		} else {
			_, _ = fmt.Fprintf(c.out, "%-34s stopped\n", name)
			down++
		}
	}
	if err := c.apiserverReady(ctx); err != nil {
		_, _ = fmt.Fprintf(c.out, "apiserver: not ready (%v)\n", err)
		down++
	} else {
		_, _ = fmt.Fprintf(c.out, "apiserver: ready on %s\n", c.apiserverURL())
	}
	if down > 0 {
		return fmt.Errorf("%d component(s) not running", down)
	}
	return nil
}
