package localcluster

import (
	"context"
	"errors"
	"fmt"
)

// StopAPIServer stops kube-apiserver (SIGTERM, then SIGKILL after the stop
// timeout), as an outage of the control plane: etcd, the other components,
// the kubelets and the pods keep running and retry.
func (c *Cluster) StopAPIServer() error {
	if c.pid(apiserverName) == 0 {
		return errors.New("kube-apiserver is not running")
	}
	c.stop(apiserverName)
	if c.pid(apiserverName) != 0 {
		return errors.New("kube-apiserver did not stop")
	}
	return nil
}

// StartAPIServer starts kube-apiserver again with the flags `up` gave it and
// waits until it is ready.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	if c.pid(apiserverName) != 0 {
		return errors.New("kube-apiserver is already running")
	}
	if c.pid(etcdName) == 0 {
		return fmt.Errorf("etcd of the cluster in %s is not running: bring the cluster down and up again", c.Dir)
	}
	if err := c.startAPIServer(); err != nil {
		return err
	}
	if err := c.waitFor(ctx, "kube-apiserver /readyz", []string{etcdName, apiserverName}, c.apiserverReady); err != nil {
		return err
	}
	c.logf("kube-apiserver ready again on %s", c.apiserverURL())
	return nil
}
