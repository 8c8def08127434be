package localcluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// kubeletSysctls are the kernel tunables the kubelet's container manager
// sets at start (setupKernelTunables); `down` puts back their old values.
var kubeletSysctls = []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes"}

func (c *Cluster) sysctlFile() string { return filepath.Join(c.Dir, "host-sysctls.json") }

func (c *Cluster) saveSysctls() error {
	vals := map[string]string{}
	for _, k := range kubeletSysctls {
		if b, err := os.ReadFile(filepath.Join("/proc/sys", k)); err == nil {
			vals[k] = strings.TrimSpace(string(b))
		}
	}
	b, err := json.Marshal(vals)
	if err != nil {
		return err
	}
	return os.WriteFile(c.sysctlFile(), b, 0o644)
}

func (c *Cluster) restoreSysctls() error {
	b, err := os.ReadFile(c.sysctlFile())
	if err != nil {
		return nil
	}
	var vals map[string]string
	if err := json.Unmarshal(b, &vals); err != nil {
		return fmt.Errorf("read %s: %w", c.sysctlFile(), err)
	}
	var errs []error
	for k, v := range vals {
		p := filepath.Join("/proc/sys", k)
		if cur, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(cur)) == v {
			continue
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore %s: %w", k, err))
		}
	}
	return errors.Join(errs...)
}
