package localcluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpudra/gpudra/test/fakedriver"
)

// PluginLabelSelector selects the chart's plugin pods.
const PluginLabelSelector = "app.kubernetes.io/component=kubelet-plugin"

// PluginPod returns the plugin pod on node that is not being deleted.
func (c *Cluster) PluginPod(ctx context.Context, node string) (*corev1.Pod, error) {
	cs, err := c.Client()
	if err != nil {
		return nil, err
	}
	pods, err := cs.CoreV1().Pods(c.cfg.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: PluginLabelSelector, FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, err
	}
	for i := range pods.Items {
		if pods.Items[i].DeletionTimestamp == nil {
			return &pods.Items[i], nil
		}
	}
	return nil, fmt.Errorf("no plugin pod on node %s", node)
}

// RestartPlugin deletes the node's plugin pod, as a node drain or an
// eviction does, and waits until the DaemonSet's new pod is Ready and has
// republished the node's pool (republish.go).
func (c *Cluster) RestartPlugin(ctx context.Context, node string) error {
	if _, err := c.nodeIndex(node); err != nil {
		return err
	}
	old, err := c.PluginPod(ctx, node)
	if err != nil {
		return err
	}
	cs, err := c.Client()
	if err != nil {
		return err
	}
	states, err := c.poolStates(ctx, cs, c.Names().Driver)
	if err != nil {
		return err
	}
	before := map[string]poolState{node: states[node]}
	if err := cs.CoreV1().Pods(old.Namespace).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete plugin pod %s: %w", old.Name, err)
	}
	if err := c.waitPluginReady(ctx, node, old.UID); err != nil {
		return err
	}
	if err := c.waitRepublished(ctx, cs, c.Names().Driver, before, []string{kubeletName(node)}); err != nil {
		return err
	}
	c.logf("plugin on %s restarted (pod %s deleted)", node, old.Name)
	return nil
}

// PluginMetricsURL is the /metrics of the node's plugin pod: its pod IP
// (reachable from the host through the node's bridge) and the port of its
// --metrics-address flag; https when the plugin runs with --metrics-secure.
func (c *Cluster) PluginMetricsURL(ctx context.Context, node string) (string, error) {
	p, err := c.PluginPod(ctx, node)
	if err != nil {
		return "", err
	}
	for _, ctr := range p.Spec.Containers {
		args := append(append([]string{}, ctr.Command...), ctr.Args...)
		scheme := "http://"
		if slices.Contains(args, "--metrics-secure") || slices.Contains(args, "--metrics-secure=true") {
			scheme = "https://" // kubeletPlugin.metrics.authentication
		}
		for _, a := range args {
			if addr, ok := strings.CutPrefix(a, "--metrics-address="); ok {
				_, port, _ := strings.Cut(addr, ":")
				return scheme + net.JoinHostPort(p.Status.PodIP, port) + "/metrics", nil
			}
		}
	}
	return "", fmt.Errorf("plugin pod %s has no --metrics-address", p.Name)
}

// FaultFile is the node's simulated fault file on the host: the simulated
// libnvidia-ml applies what is appended (test/sim/faultfile.go).
func (c *Cluster) FaultFile(node string) string {
	return filepath.Join(c.Node(node).DriverRoot(), fakedriver.FaultFile)
}

// InjectFault appends a fault line ("gpu-3 xid 79", "gpu-1 lost", ...).
func (c *Cluster) InjectFault(node string, fault ...string) error {
	if _, err := c.nodeIndex(node); err != nil {
		return err
	}
	f, err := os.OpenFile(c.FaultFile(node), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = fmt.Fprintln(f, strings.Join(fault, " "))
	return err
}

// ClearFaults empties the node's fault file: its GPUs are reset.
func (c *Cluster) ClearFaults(node string) error {
	if _, err := c.nodeIndex(node); err != nil {
		return err
	}
	return fakedriver.WriteFaults(c.Node(node).DriverRoot(), "")
}

// NvidiaSMI runs the fake nvidia-smi of the node's driver root, as an
// administrator runs nvidia-smi on a node: `-i 0,1 -mig 1`, `mig -i 0 -cgi
// 3g.40gb,1g.10gb -C`, `mig -i 0 -dci -dgi` change the simulated GPUs' MIG
// state (test/fakegpu). The plugin reads it at its start: restart it (or
// helm-upgrade) afterwards. Like the real tool it needs the driver's
// libnvidia-ml.so.1, which the host's loader does not know of here: it is
// preloaded, as the plugin starts it.
func (c *Cluster) NvidiaSMI(ctx context.Context, node string, args ...string) (string, error) {
	if _, err := c.nodeIndex(node); err != nil {
		return "", err
	}
	root := c.Node(node).DriverRoot()
	smi := filepath.Join(root, fakedriver.BinDir, "nvidia-smi")
	argv := append([]string{"env", "LD_PRELOAD=" + filepath.Join(root, fakedriver.LibDir, fakedriver.NVMLSONAME), smi}, args...)
	return run(ctx, argv...)
}
