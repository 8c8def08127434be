package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// An API-server-only cluster is etcd and one kube-apiserver, no nodes: what
// checks the chart's admission policies and RBAC on a Kubernetes version
// other than the one the local cluster runs (make policy-versions builds
// kube-apiserver-v1.34.4 and -v1.35.4 into _output/bin). It runs beside a
// full cluster when its Dir and ports differ.

// APIServerOnlyConfig is the configuration of an API-server-only cluster
// of the kube-apiserver binary apiserver with the given feature gates, in
// dir, on ports away from DefaultConfig's (offset from them by 100).
func APIServerOnlyConfig(repoRoot, dir, apiserver, featureGates string) Config {
	cfg := DefaultConfig(repoRoot)
	cfg.Dir = dir
	cfg.Nodes = nil
	cfg.Values = nil
	cfg.APIServerOnly = apiserver
	cfg.FeatureGates = featureGates
	cfg.EtcdPort += 100
	cfg.EtcdPeerPort += 100
	cfg.APIServerPort += 100
	return cfg
}

// apiserverBinary is the kube-apiserver the cluster runs.
func (c *Cluster) apiserverBinary() string {
	if c.cfg.APIServerOnly != "" {
		return c.cfg.APIServerOnly
	}
	return c.bin("kube-apiserver")
}

// apiserverFeatureGates are the API server's --feature-gates.
func (c *Cluster) apiserverFeatureGates() string {
	if c.cfg.APIServerOnly != "" {
		return c.cfg.FeatureGates
	}
	return alphaFeatureGates
}

// controlPlane lists the control-plane components of the cluster.
func (c *Cluster) controlPlane() []string {
	if c.cfg.APIServerOnly != "" {
		return []string{etcdName, apiserverName}
	}
	return controlPlaneComponents()
}

// upAPIServerOnly starts etcd and the API server and waits until it is
// ready; nothing on the host is changed besides the cluster's directory.
func (c *Cluster) upAPIServerOnly(ctx context.Context) error {
	if _, err := os.Stat(c.cfg.APIServerOnly); err != nil {
		return fmt.Errorf("kube-apiserver of an API-server-only cluster: %w (make policy-versions builds it)", err)
	}
	for _, d := range []string{c.LogDir(), c.PIDDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := c.cfg.save(); err != nil {
		return err
	}
	c.logf("starting an API-server-only cluster in %s (%s)", c.Dir, filepath.Base(c.cfg.APIServerOnly))
	err := c.makePKI()
	if err == nil {
		err = c.startEtcd()
	}
	if err == nil {
		err = c.waitFor(ctx, "etcd", []string{etcdName}, c.etcdHealthy)
	}
	if err == nil {
		err = c.startAPIServer()
	}
	if err == nil {
		err = c.waitFor(ctx, "kube-apiserver /readyz", []string{etcdName, apiserverName}, c.apiserverReady)
	}
	if err != nil {
		return errors.Join(err, c.keepLogs())
	}
	c.logf("API server ready: export KUBECONFIG=%s", c.AdminKubeconfig())
	return nil
}
