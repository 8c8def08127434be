package localcluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const cgroupV1Root = "/sys/fs/cgroup"

// cgroupHierarchies lists the mounted cgroup v1 hierarchies (their
// directories under /sys/fs/cgroup); the cgroup2 "unified" mount of a hybrid
// host is not one of them.
func cgroupHierarchies() ([]string, error) {
	entries, err := os.ReadDir(cgroupV1Root)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		dir := filepath.Join(cgroupV1Root, e.Name())
		if e.Name() == "unified" || !e.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, "cgroup.controllers")); err == nil {
			return nil, errors.New("the host uses cgroup v2 only: the local cluster is set up for cgroup v1 hosts")
		}
		out = append(out, dir)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no cgroup v1 hierarchy under %s", cgroupV1Root)
	}
	return out, nil
}

// makeCgroups creates <parent>/system and <parent>/pods of a node in every
// hierarchy; cpuset cgroups get their parent's cpus and mems, without which
// no process can join them.
func (c *Cluster) makeCgroups(node string) error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	parent := CgroupParent(c.clusterName(), node)
	for _, h := range hs {
		for _, sub := range []string{"system", "pods"} {
			rel := strings.Split(strings.TrimPrefix(parent+"/"+sub, "/"), "/")
			dir := h
			for _, part := range rel {
				dir = filepath.Join(dir, part)
				if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
					return fmt.Errorf("create cgroup %s: %w", dir, err)
				}
				if filepath.Base(h) == "cpuset" {
					for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
						v, err := os.ReadFile(filepath.Join(filepath.Dir(dir), f))
						if err != nil {
							return err
						}
						if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
							return fmt.Errorf("set %s of %s: %w", f, dir, err)
						}
					}
				}
			}
		}
	}
	return nil
}

// joinCgroup moves pid into the node's cgroup sub in every hierarchy; its
// later children (containerd's shims) inherit it.
func (c *Cluster) joinCgroup(node, sub string, pid int) error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	rel := strings.TrimPrefix(CgroupParent(c.clusterName(), node)+"/"+sub, "/")
	for _, h := range hs {
		if err := os.WriteFile(filepath.Join(h, rel, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("move pid %d into cgroup %s of %s: %w", pid, rel, filepath.Base(h), err)
		}
	}
	return nil
}

// killCgroups kills every process in the node's cgroups (containers, shims,
// whatever containerd left) and removes the cgroups, deepest first.
func (c *Cluster) killCgroups(node string) error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	parent := strings.TrimPrefix(CgroupParent(c.clusterName(), node), "/")
	// The pids hierarchy lists every process; kill until it is empty.
	deadline := time.Now().Add(15 * time.Second)
	for {
		pids := cgroupPIDs(filepath.Join(cgroupV1Root, "pids", parent))
		if len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes of node %s still alive: %v", node, pids)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var errs []error
	for _, h := range hs {
		root := filepath.Join(h, parent)
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil && !os.IsNotExist(err) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dirs[i], err))
			}
		}
	}
	// The cluster's top cgroup goes when its last node does.
	for _, h := range hs {
		_ = os.Remove(filepath.Join(h, filepath.Dir(parent)))
	}
	return errors.Join(errs...)
}

// cgroupPIDs lists the processes of a cgroup and its descendants.
func cgroupPIDs(root string) []int {
	var pids []int
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			return nil
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}
