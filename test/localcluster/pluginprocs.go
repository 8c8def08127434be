package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gpudra/gpudra/internal/plugin/mpspod"
)

// ImportImage imports an OCI image tarball (e.g. the fault suite's
// gpudra-failpoints.tar) into every node's runtime, as `up` does with
// the tarballs of the images dir.
func (c *Cluster) ImportImage(ctx context.Context, tar string) error {
	if _, err := os.Stat(tar); err != nil {
		return fmt.Errorf("image tarball: %w", err)
	}
	if err := c.refresh(); err != nil {
		return err
	}
	for _, n := range c.cfg.Nodes {
		if err := c.importImage(ctx, n.Name, tar); err != nil {
			return err
		}
	}
	c.logf("imported %s into every node", filepath.Base(tar))
	return nil
}

// PluginPIDs returns the host PIDs of the gpu-kubelet-plugin processes
// running in node's pods (two during a rolling update), found through
// /proc: their executable and their cgroup, which is under the node's. It
// needs no API server, so it also works during an outage. The MPS daemon
// Pods run the same binary (its mps-control-daemon subcommand): they are no
// plugin and left out.
func (c *Cluster) PluginPIDs(node string) ([]int, error) {
	if _, err := c.nodeIndex(node); err != nil {
		return nil, err
	}
	pids, err := podProcesses("gpu-kubelet-plugin", CgroupParent(c.clusterName(), node)+"/pods/")
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(pids, func(pid int) bool {
		cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		return err == nil && slices.Contains(strings.Split(string(cmdline), "\x00"), mpspod.Subcommand)
	}), nil
}

// ControllerPIDs returns the host PIDs of the gpu-controller processes
// running in the cluster's pods, on any node.
func (c *Cluster) ControllerPIDs() ([]int, error) {
	return podProcesses("gpu-controller", "/"+c.clusterName()+"/")
}

// podProcesses lists the processes whose executable has the base name exe
// and whose cgroup (in any hierarchy) starts with cgroupPrefix.
func podProcesses(exe, cgroupPrefix string) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		path, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil || filepath.Base(strings.TrimSuffix(path, " (deleted)")) != exe || !alive(pid) {
			continue
		}
		cg, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // exited meanwhile
			}
			return nil, err
		}
		if strings.Contains(string(cg), ":"+cgroupPrefix) {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	return pids, nil
}
