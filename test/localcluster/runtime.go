package localcluster

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
)

// The container runtimes a node can run (NodeSpec.Runtime): containerd with
// runc, the default, or CRI-O with runc and conmon (crio.go).
const (
	RuntimeContainerd = "containerd"
	RuntimeCRIO       = "crio"
)

// Runtimes are the values NodeSpec.Runtime takes ("" is containerd).
var Runtimes = []string{RuntimeContainerd, RuntimeCRIO}

// nodeRuntime is a node's runtime ("" is containerd).
func nodeRuntime(name string) (string, error) {
	if name == "" {
		return RuntimeContainerd, nil
	}
	if !slices.Contains(Runtimes, name) {
		return "", fmt.Errorf("unknown container runtime %q: want %s or %s", name, RuntimeContainerd, RuntimeCRIO)
	}
	return name, nil
}

// spec is the recorded spec of a node; a node not recorded runs containerd.
func (c *Cluster) spec(node string) NodeSpec {
	for _, n := range c.cfg.Nodes {
		if n.Name == node {
			return n
		}
	}
	return NodeSpec{Name: node}
}

// runtimeOf is the runtime a recorded node runs (containerd for a spec the
// config check let through, which validates Runtime).
func (c *Cluster) runtimeOf(node string) string {
	r, err := nodeRuntime(c.spec(node).Runtime)
	if err != nil {
		return RuntimeContainerd
	}
	return r
}

// runtimeName is the component name (log, PID file) of a node's runtime.
func (c *Cluster) runtimeName(node string) string {
	return c.runtimeOf(node) + "-" + node
}

// RuntimeSocket is the CRI socket of a node's runtime as the node (its
// kubelet) sees it.
func RuntimeSocket(runtime string) string {
	if runtime == RuntimeCRIO {
		return CRIOSocket
	}
	return ContainerdSocket
}

// hostSocket is the node's CRI socket as the host sees it.
func (c *Cluster) hostSocket(node string) string {
	return c.Node(node).HostPathOf(RuntimeSocket(c.runtimeOf(node)))
}

// startNodeRuntime starts the node's container runtime and imports the
// images into it.
func (c *Cluster) startNodeRuntime(ctx context.Context, spec NodeSpec) error {
	runtime, err := nodeRuntime(spec.Runtime)
	if err != nil {
		return fmt.Errorf("node %s: %w", spec.Name, err)
	}
	if runtime == RuntimeCRIO {
		return c.startCRIO(ctx, spec)
	}
	return c.startContainerd(ctx, spec)
}

// TagImage gives the image src the further name dst in every node's CRI
// image store, as pushing one image under a new tag does (an upgrade test
// installs the chart with the new tag). Only containerd nodes can: with a
// CRI-O node it is an error, before any node is changed.
func (c *Cluster) TagImage(ctx context.Context, src, dst string) error {
	if err := c.refresh(); err != nil {
		return err
	}
	for _, n := range c.cfg.Nodes {
		if c.runtimeOf(n.Name) == RuntimeCRIO {
			return fmt.Errorf("node %s runs CRI-O: tagging an image there is not supported; remove the node first", n.Name)
		}
	}
	for _, n := range c.cfg.Nodes {
		if _, err := run(ctx, c.ctrImages(n.Name, "tag", "--force", src, dst)...); err != nil {
			return fmt.Errorf("node %s: tag %s as %s: %w", n.Name, src, dst, err)
		}
	}
	c.logf("tagged %s as %s on every node", src, dst)
	return nil
}

// ctrImages is the command line of `ctr images <args>` in a containerd
// node's CRI namespace.
func (c *Cluster) ctrImages(node string, args ...string) []string {
	return append([]string{c.bin("ctr"), "--address", c.hostSocket(node), "-n", "k8s.io", "images"}, args...)
}

// importImage imports an OCI image tarball into a node's runtime, in the
// CRI's image store.
func (c *Cluster) importImage(ctx context.Context, node, tar string) error {
	var argv []string
	if c.runtimeOf(node) == RuntimeCRIO {
		argv = c.nsenter(node, c.bin(crioImportBinary), "--root", CRIOStorageRoot, "--runroot", CRIOStorageRunRoot,
			"--driver", CRIOStorageDriver, tar)
	} else {
		argv = c.ctrImages(node, "import", tar)
	}
	if _, err := run(ctx, argv...); err != nil {
		return fmt.Errorf("node %s: import %s: %w", node, filepath.Base(tar), err)
	}
	return nil
}
