package localcluster

import (
	"fmt"
)

// simKernelBinary performs the kernel's effect of the writes to a node's
// simulated PCI sysfs (test/cmd/gpudra-sim-kernel, fakedriver.KernelWatcher):
// the plugin's passthrough rebinds GPUs by writing driver_override, bind and
// unbind, which are plain files in a fake driver root.
//
// One process per node, not one per cluster and not a goroutine: the
// CLI that starts the cluster exits after `up`, so the watcher must be a
// process of its own, and a node's process starts and stops with the node
// (prepareNode, stopNode), so add-node and remove-node need no bookkeeping
// of which roots a cluster-wide watcher covers. It runs on the host, on the
// host path of the node's driver root: the plugin's writes through the
// node's bind mount are to the same files, which inotify reports.
const simKernelBinary = "gpudra-sim-kernel"

// SimKernelName is the component name (log, PID file) of a node's simulated
// kernel.
func SimKernelName(node string) string { return "sim-kernel-" + node }

// startSimKernel starts the node's simulated kernel on its driver root, in
// the node's system cgroup (which stopNode empties too). The watches are in
// place once the log says so; the plugin writes only after its pod starts,
// long after.
func (c *Cluster) startSimKernel(node string) error {
	pid, err := c.start(SimKernelName(node), []string{c.bin(simKernelBinary), "--root=" + c.Node(node).DriverRoot()}, nil)
	if err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	return c.joinCgroup(node, "system", pid)
}
