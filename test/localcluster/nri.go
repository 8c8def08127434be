package localcluster

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/gpudra/gpudra/test/fakedriver"
)

// NRISocket is where each containerd node serves NRI (under the node's own
// /run/containerd); CRI-O nodes serve it at CRIONRISocket.
const NRISocket = "/run/containerd/nri.sock"

// simNRIBinary is the NRI plugin that adds the fake driver root's
// process-recording hook to every container (test/cmd/gpudra-sim-nri).
const simNRIBinary = "gpudra-sim-nri"

// nriPluginDir holds the NRI plugins a node's containerd starts itself
// (named <index>-<name>, as NRI requires).
func (n NodeLayout) nriPluginDir() string { return filepath.Join(n.Dir, "nri-plugins") }

// RecordHookPath is the fake driver root's process-recording hook as a
// node of the driver layout sees it.
func RecordHookPath(l DriverLayout) string { return filepath.Join(l.NodePath, fakedriver.RecordHook) }

// writeNRIPlugins writes a node's plugin directory: a script that starts
// gpudra-sim-nri with the hook's path (the runtime passes a pre-registered
// plugin no arguments).
func (c *Cluster) writeNRIPlugins(spec NodeSpec) error {
	layout, err := driverLayout(spec.Layout)
	if err != nil {
		return err
	}
	dir := c.Node(spec.Name).nriPluginDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "10-"+simNRIBinary), []byte(c.nriScript(spec, layout)), 0o755)
}

// nriScript starts gpudra-sim-nri for the node: on CRI-O, which has no
// restrict_oom_score_adj, with --restrict-oom-score-adj.
func (c *Cluster) nriScript(spec NodeSpec, layout DriverLayout) string {
	extra := ""
	if r, _ := nodeRuntime(spec.Runtime); r == RuntimeCRIO {
		extra = " --restrict-oom-score-adj"
	}
	return fmt.Sprintf("#!/bin/sh\n# The local cluster's NRI plugin (test/localcluster/nri.go).\nexec %q --record-hook=%q%s\n",
		c.bin(simNRIBinary), RecordHookPath(layout), extra)
}
