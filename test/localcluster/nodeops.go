package localcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/gpudra/gpudra/api/v1alpha1"
)

// The node labels the harness sets, as an operator would on a real cluster.
const (
	// PluginDisableLabel=false keeps every plugin DaemonSet of the chart off
	// a node (the chart's rule): StopPlugin sets it, StartPlugin removes it.
	PluginDisableLabel = "gpudra.io/kubelet-plugin"
	// PluginProfileLabel selects a node group of the chart's
	// kubeletPlugin.nodeGroups: AddNode with plugin flags gives its node a
	// group named after the node and this label with that name.
	PluginProfileLabel = "gpudra.io/plugin-profile"
)

// NodeGroup is one entry of the chart's kubeletPlugin.nodeGroups.
type NodeGroup struct {
	Name string `json:"name"`
	// NodeSelector is the one node label of the group's nodes.
	NodeSelector map[string]string `json:"nodeSelector"`
	// MIG is the group's kubeletPlugin.mig; empty keeps the chart's.
	MIG string `json:"mig,omitempty"`
	// NvidiaDriverRoot is the group's kubeletPlugin.nvidiaDriverRoot, the
	// root of its nodes' driver layout; empty keeps the chart's.
	NvidiaDriverRoot string   `json:"nvidiaDriverRoot,omitempty"`
	ExtraArgs        []string `json:"extraArgs,omitempty"`
}

// NodeGroupFor is the node group of a node added with its own plugin flags:
// named after the node, selected by PluginProfileLabel=<node>; --mig=X sets
// the group's mig value, --layout=L (not a plugin flag: the node's driver
// installation, DriverLayouts) its nvidiaDriverRoot, the other flags are
// its extraArgs.
func NodeGroupFor(node string, pluginFlags []string) (NodeGroup, error) {
	g := NodeGroup{Name: node, NodeSelector: map[string]string{PluginProfileLabel: node}}
	for _, f := range pluginFlags {
		if !strings.HasPrefix(f, "--") {
			return g, fmt.Errorf("plugin flag %q: write flags as --name=value", f)
		}
		if v, ok := strings.CutPrefix(f, "--mig="); ok {
			g.MIG = v
			continue
		}
		if v, ok := strings.CutPrefix(f, "--layout="); ok {
			l, err := driverLayout(v)
			if err != nil {
				return g, err
			}
			g.NvidiaDriverRoot = l.NodePath
			continue
		}
		g.ExtraArgs = append(g.ExtraArgs, f)
	}
	return g, nil
}

// writeNodeGroupsValues writes the node groups as Helm values (JSON is
// YAML), or removes the file when there are none.
func (c *Cluster) writeNodeGroupsValues() error {
	if len(c.cfg.NodeGroups) == 0 {
		if err := os.Remove(c.NodeGroupsValues()); err != nil && !os.IsNotExist(err) {
			return err
		}
		return nil
	}
	values := map[string]any{"kubeletPlugin": map[string]any{"nodeGroups": c.cfg.NodeGroups}}
	b, err := json.MarshalIndent(values, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(c.NodeGroupsValues(), b, 0o644)
}

// nodeLabelsFlag is the kubelet's --node-labels value, sorted.
func nodeLabelsFlag(labels map[string]string) string {
	var kv []string
	for k, v := range labels {
		kv = append(kv, k+"="+v)
	}
	slices.Sort(kv)
	return strings.Join(kv, ",")
}

// setNodeLabel sets (value != nil) or removes a label of a Node object.
func (c *Cluster) setNodeLabel(ctx context.Context, node, key string, value *string) error {
	cs, err := c.Client()
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]*string{key: value}}})
	if err != nil {
		return err
	}
	if _, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("label node %s: %w", node, err)
	}
	return nil
}

// StopPlugin takes the node's plugin away the way an operator does for a
// while (driver maintenance): the node gets PluginDisableLabel=false, which
// every plugin DaemonSet's node affinity excludes, so the DaemonSet
// controller deletes the pod. It returns once the pod is gone (its process
// has stopped). The node's ResourceSlices stay until the kubelet withdraws
// them or someone deletes them.
func (c *Cluster) StopPlugin(ctx context.Context, node string) error {
	if _, err := c.nodeIndex(node); err != nil {
		return err
	}
	off := "false"
	if err := c.setNodeLabel(ctx, node, PluginDisableLabel, &off); err != nil {
		return err
	}
	cs, err := c.Client()
	if err != nil {
		return err
	}
	err = c.waitFor(ctx, "no plugin pod on "+node, []string{kubeletName(node)}, func(ctx context.Context) error {
		pods, err := cs.CoreV1().Pods(c.cfg.Namespace).List(ctx, metav1.ListOptions{
			LabelSelector: PluginLabelSelector, FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("plugin pod %s still there", pods.Items[0].Name)
		}
		return nil
	})
	if err != nil {
		return err
	}
	c.logf("plugin on %s stopped (node labelled %s=false)", node, PluginDisableLabel)
	return nil
}

// StartPlugin removes PluginDisableLabel and waits until the node's new
// plugin pod is Ready (registered with the kubelet).
func (c *Cluster) StartPlugin(ctx context.Context, node string) error {
	if _, err := c.nodeIndex(node); err != nil {
		return err
	}
	if err := c.setNodeLabel(ctx, node, PluginDisableLabel, nil); err != nil {
		return err
	}
	if err := c.waitPluginReady(ctx, node, ""); err != nil {
		return err
	}
	c.logf("plugin on %s started", node)
	return nil
}

// waitPluginReady waits for a Ready plugin pod on node other than notUID.
func (c *Cluster) waitPluginReady(ctx context.Context, node string, notUID types.UID) error {
	return c.waitFor(ctx, "a Ready plugin pod on "+node, []string{kubeletName(node)}, func(ctx context.Context) error {
		p, err := c.PluginPod(ctx, node)
		if err != nil {
			return err
		}
		if p.UID == notUID {
			return fmt.Errorf("old pod %s still there", p.Name)
		}
		if !podReady(p) {
			return fmt.Errorf("pod %s not Ready", p.Name)
		}
		return nil
	})
}

// podReady tells whether the pod's Ready condition is true.
func podReady(p *corev1.Pod) bool {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// AddNode joins one more simulated GPU node to the running cluster: its
// client certificate, driver root, mount namespace, container runtime with
// the images, CNI bridge and kubelet, with the next free slot. With plugin
// flags the node gets a node group of the chart of its own (NodeGroupFor,
// installed with helm upgrade before the node starts) and the group's
// label; --runtime=crio (no plugin flag, see nodeFlags) runs CRI-O there. It returns when the node is Ready, its plugin pod Ready and its
// pool published.
func (c *Cluster) AddNode(ctx context.Context, spec NodeSpec, pluginFlags ...string) error {
	if err := c.refresh(); err != nil {
		return err
	}
	if _, err := c.nodeIndex(spec.Name); err == nil {
		return fmt.Errorf("node %s exists already: remove-node it first", spec.Name)
	}
	if !dnsLabel.MatchString(spec.Name) || spec.Profile == "" {
		return fmt.Errorf("node %q with profile %q: want a DNS label and a profile", spec.Name, spec.Profile)
	}
	spec.Slot = c.freeSlot()
	spec, pluginFlags, err := nodeFlags(spec, pluginFlags)
	if err != nil {
		return err
	}
	if len(pluginFlags) > 0 {
		g, err := NodeGroupFor(spec.Name, pluginFlags)
		if err != nil {
			return err
		}
		labels := map[string]string{}
		for k, v := range spec.Labels {
			labels[k] = v
		}
		spec.Labels = labels
		for k, v := range g.NodeSelector {
			spec.Labels[k] = v
		}
		c.cfg.NodeGroups = append(c.cfg.NodeGroups, g)
		if err := c.cfg.save(); err != nil {
			return err
		}
		// Before the node exists: WaitDriver waits for the pools of the
		// recorded nodes.
		if err := c.InstallDriver(ctx); err != nil {
			return fmt.Errorf("node %s: install its node group: %w", spec.Name, err)
		}
	}
	// Recorded before anything starts: `down` stops whatever of it runs.
	c.cfg.Nodes = append(c.cfg.Nodes, spec)
	if err := c.cfg.save(); err != nil {
		return err
	}
	if err := c.addIdentity(identity{name: "node-" + spec.Name, cn: "system:node:" + spec.Name, groups: []string{"system:nodes"}}); err != nil {
		return fmt.Errorf("node %s: client certificate: %w", spec.Name, err)
	}
	if err := c.prepareNode(ctx, spec); err != nil {
		return err
	}
	if err := c.startNodeRuntime(ctx, spec); err != nil {
		return err
	}
	if err := c.startKubelet(spec); err != nil {
		return err
	}
	cs, err := c.Client()
	if err != nil {
		return err
	}
	if err := c.waitFor(ctx, "node "+spec.Name+" Ready", []string{kubeletName(spec.Name), c.runtimeName(spec.Name)}, func(ctx context.Context) error {
		return nodeReady(ctx, cs, spec.Name)
	}); err != nil {
		return err
	}
	if err := c.waitPluginReady(ctx, spec.Name, ""); err != nil {
		return err
	}
	if err := c.waitFor(ctx, "the pool of "+spec.Name, []string{kubeletName(spec.Name)}, func(ctx context.Context) error {
		return c.poolsPublished(ctx, cs, c.Names().Driver)
	}); err != nil {
		return err
	}
	c.logf("node %s (%s) added in slot %d, plugin flags %v", spec.Name, spec.Profile, spec.Slot, pluginFlags)
	return nil
}

// nodeFlags takes the node's own settings out of add-node's flags:
// --layout=L sets the node's driver installation and stays a plugin flag
// (NodeGroupFor turns it into the group's nvidiaDriverRoot); --runtime=R
// sets the node's container runtime and is no plugin flag (the plugin runs
// the same on every runtime).
func nodeFlags(spec NodeSpec, flags []string) (NodeSpec, []string, error) {
	var plugin []string
	for _, f := range flags {
		if v, ok := strings.CutPrefix(f, "--runtime="); ok {
			if _, err := nodeRuntime(v); err != nil {
				return spec, nil, fmt.Errorf("node %s: %w", spec.Name, err)
			}
			spec.Runtime = v
			continue
		}
		if v, ok := strings.CutPrefix(f, "--layout="); ok {
			spec.Layout = v
		}
		plugin = append(plugin, f)
	}
	return spec, plugin, nil
}

func (c *Cluster) freeSlot() int {
	for slot := 0; ; slot++ {
		if !slices.ContainsFunc(c.cfg.Nodes, func(n NodeSpec) bool { return n.Slot == slot }) {
			return slot
		}
	}
}

// RemoveNode takes a node out of the cluster for good: it stops its
// processes and removes its mount namespace, cgroups and bridge, deletes the
// Node object, its Pods and the node's ResourceSlices, drops its node group
// (helm upgrade) and removes its directory.
func (c *Cluster) RemoveNode(ctx context.Context, node string) error {
	if err := c.refresh(); err != nil {
		return err
	}
	if _, err := c.nodeIndex(node); err != nil {
		return err
	}
	if err := c.stopNode(ctx, node); err != nil {
		return err
	}
	cs, err := c.Client()
	if err != nil {
		return err
	}
	if err := cs.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete node %s: %w", node, err)
	}
	// The node's Pods would stay bound to it until the pod garbage
	// collector's quarantine ends; a node added again under the name would
	// find them (its kubelet adopts the old plugin Pod, whose DaemonSet is
	// gone, and the new DaemonSet's Pod came 2 minutes late). Its processes
	// are stopped, so nothing is left to terminate gracefully.
	pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return fmt.Errorf("list the Pods of %s: %w", node, err)
	}
	now := int64(0)
	for _, p := range pods.Items {
		if err := cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &now}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete Pod %s/%s of %s: %w", p.Namespace, p.Name, node, err)
		}
	}
	if err := cs.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{FieldSelector: "spec.nodeName=" + node + ",spec.driver=" + v1alpha1.DriverName}); err != nil {
		return fmt.Errorf("delete the ResourceSlices of %s: %w", node, err)
	}
	c.cfg.Nodes = slices.DeleteFunc(c.cfg.Nodes, func(n NodeSpec) bool { return n.Name == node })
	groups := len(c.cfg.NodeGroups)
	c.cfg.NodeGroups = slices.DeleteFunc(c.cfg.NodeGroups, func(g NodeGroup) bool { return g.Name == node })
	if err := c.cfg.save(); err != nil {
		return err
	}
	if len(c.cfg.NodeGroups) != groups {
		if err := c.InstallDriver(ctx); err != nil {
			return fmt.Errorf("node %s removed, but not its node group: %w", node, err)
		}
	}
	if err := os.RemoveAll(c.Node(node).Dir); err != nil {
		return fmt.Errorf("remove %s: %w", c.Node(node).Dir, err)
	}
	c.logf("node %s removed", node)
	return nil
}
