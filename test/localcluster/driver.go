package localcluster

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpudra/gpudra/internal/shared/compat"
	"github.com/gpudra/gpudra/test/images"
)

// Client is a clientset with the admin's credentials, made once.
func (c *Cluster) Client() (kubernetes.Interface, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.client != nil {
		return c.client, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.AdminKubeconfig())
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", c.AdminKubeconfig(), err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	if c.client, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	return c.client, nil
}

func (c *Cluster) chartDir() string { return filepath.Join(c.cfg.RepoRoot, images.DefaultChartDir) }

// HelmArgs is the helm command line (without the binary) that installs or
// upgrades the driver with the cluster's values plus extra --set values.
func (c *Cluster) HelmArgs(extra ...string) []string {
	args := []string{"upgrade", "--install", c.cfg.Release, c.chartDir(),
		"--kubeconfig", c.AdminKubeconfig(), "--namespace", c.cfg.Namespace, "--create-namespace",
		"--values", filepath.Join(c.chartDir(), images.SimulatedValues)}
	if len(c.cfg.NodeGroups) > 0 {
		args = append(args, "--values", c.NodeGroupsValues())
	}
	for _, v := range append(append([]string{}, c.cfg.Values...), extra...) {
		args = append(args, "--set", v)
	}
	return args
}

// InstallDriver runs `helm upgrade --install` of the chart (extra: more
// --set values, e.g. for a rolling update) and waits until the driver is
// installed completely (see WaitDriver) and every node whose plugin pod the
// upgrade replaced has republished its pool (republish.go).
func (c *Cluster) InstallDriver(ctx context.Context, extra ...string) error {
	if err := c.refresh(); err != nil {
		return err
	}
	if err := c.writeNodeGroupsValues(); err != nil {
		return err
	}
	cs, err := c.Client()
	if err != nil {
		return err
	}
	oldDriver := c.Names().Driver
	before, err := c.poolStates(ctx, cs, oldDriver)
	if err != nil {
		return err
	}
	out, err := run(ctx, append([]string{c.cfg.Helm}, c.HelmArgs(extra...)...)...)
	if err != nil {
		return fmt.Errorf("helm: %w", err)
	}
	n := namesOfValues(append(append([]string{}, c.cfg.Values...), extra...))
	c.mu.Lock()
	c.names = &n
	c.mu.Unlock()
	c.logf("helm: %s", firstLine(out))
	if err := c.WaitDriver(ctx); err != nil {
		return err
	}
	if n.Driver != oldDriver {
		return nil // a new driver's pools: WaitDriver waited for them
	}
	if err := c.waitRepublished(ctx, cs, n.Driver, before, []string{apiserverName}); err != nil {
		return err
	}
	c.logf("driver: the replaced plugin pods' pools republished")
	return nil
}

// namesOfValues returns the names of the driver that --set values install:
// the last compatibility=... value decides (internal/shared/compat); a value
// the chart would reject leaves gpudra's names.
func namesOfValues(values []string) compat.Names {
	var flags compat.Flags
	for _, v := range values {
		if key, val, ok := strings.Cut(v, "="); ok && key == "compatibility" {
			flags.Compatibility = val
		}
	}
	names, err := compat.Resolve(flags)
	if err != nil {
		return compat.Default()
	}
	return names
}

// Names are the names of the installed driver: its driver name and classes.
func (c *Cluster) Names() compat.Names {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.names != nil {
		return *c.names
	}
	return namesOfValues(c.cfg.Values)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

// WaitDriver waits until the plugin DaemonSet has an up-to-date Ready pod on
// every node, the controller Deployment is available, every node's pool is
// published, the base DeviceClasses exist and the webhook, reached through
// its Service, rejects an invalid claim.
func (c *Cluster) WaitDriver(ctx context.Context) error {
	if err := c.refresh(); err != nil {
		return err
	}
	cs, err := c.Client()
	if err != nil {
		return err
	}
	ns := c.cfg.Namespace
	names := c.Names()
	steps := []struct {
		what  string
		check func(context.Context) error
	}{
		{"the plugin DaemonSet rolled out on every node", func(ctx context.Context) error {
			return c.daemonSetReady(ctx, cs)
		}},
		{"the controller Deployment available", func(ctx context.Context) error {
			return deploymentsReady(ctx, cs, ns)
		}},
		{"a ResourceSlice pool per node", func(ctx context.Context) error {
			return c.poolsPublished(ctx, cs, names.Driver)
		}},
		{"the DeviceClasses " + names.GPUClass + " and " + names.MIGClass, func(ctx context.Context) error {
			for _, name := range []string{names.GPUClass, names.MIGClass} {
				if _, err := cs.ResourceV1().DeviceClasses().Get(ctx, name, metav1.GetOptions{}); err != nil {
					return err
				}
			}
			return nil
		}},
		{"the webhook rejecting an invalid claim", func(ctx context.Context) error {
			return webhookRejects(ctx, cs, names)
		}},
	}
	for _, s := range steps {
		if err := c.waitFor(ctx, s.what, []string{apiserverName}, s.check); err != nil {
			return fmt.Errorf("%w\n%s", err, c.describeDriver(ctx, cs))
		}
		c.logf("driver: %s", s.what)
	}
	return nil
}

func (c *Cluster) daemonSetReady(ctx context.Context, cs kubernetes.Interface) error {
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	want := 0 // nodes that should have a plugin pod: all but the stopped ones
	for _, n := range nodes.Items {
		if n.Labels[PluginDisableLabel] != "false" {
			want++
		}
	}
	list, err := cs.AppsV1().DaemonSets(c.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: PluginLabelSelector})
	if err != nil {
		return err
	}
	if len(list.Items) == 0 {
		return errors.New("no DaemonSet yet")
	}
	scheduled := 0
	for _, ds := range list.Items {
		if !daemonSetDone(&ds) {
			return fmt.Errorf("DaemonSet %s: %d/%d updated, %d ready, %d available", ds.Name,
				ds.Status.UpdatedNumberScheduled, ds.Status.DesiredNumberScheduled, ds.Status.NumberReady, ds.Status.NumberAvailable)
		}
		scheduled += int(ds.Status.DesiredNumberScheduled)
	}
	if scheduled != want {
		return fmt.Errorf("the plugin DaemonSets want %d pods, one on each of the %d nodes with a plugin expected", scheduled, want)
	}
	return nil
}

func daemonSetDone(ds *appsv1.DaemonSet) bool {
	s := ds.Status
	return s.ObservedGeneration >= ds.Generation &&
		s.UpdatedNumberScheduled == s.DesiredNumberScheduled && s.NumberAvailable == s.DesiredNumberScheduled &&
		s.NumberUnavailable == 0 && s.CurrentNumberScheduled == s.DesiredNumberScheduled &&
		s.NumberReady == s.DesiredNumberScheduled
}

func deploymentsReady(ctx context.Context, cs kubernetes.Interface, ns string) error {
	list, err := cs.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	if len(list.Items) == 0 {
		return errors.New("no Deployment yet")
	}
	for _, d := range list.Items {
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		s := d.Status
		if s.ObservedGeneration < d.Generation || s.UpdatedReplicas != want || s.AvailableReplicas != want || s.Replicas != want {
			return fmt.Errorf("deployment %s: %d/%d updated, %d available", d.Name, s.UpdatedReplicas, want, s.AvailableReplicas)
		}
	}
	return nil
}

func (c *Cluster) poolsPublished(ctx context.Context, cs kubernetes.Interface, driver string) error {
	list, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	have := map[string]bool{}
	for _, s := range list.Items {
		if s.Spec.Driver == driver {
			have[s.Spec.Pool.Name] = true
		}
	}
	stopped, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: PluginDisableLabel + "=false"})
	if err != nil {
		return err
	}
	for _, n := range stopped.Items {
		have[n.Name] = true // no plugin there: StopPlugin
	}
	for _, n := range c.cfg.Nodes {
		if !have[n.Name] {
			return fmt.Errorf("no pool %s of %s yet", n.Name, driver)
		}
	}
	return nil
}

// webhookRejects creates (server-side dry run) a claim whose parameters are
// invalid: only the driver's webhook can refuse it.
func webhookRejects(ctx context.Context, cs kubernetes.Interface, names compat.Names) error {
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "gpudra-webhook-probe", Namespace: metav1.NamespaceDefault},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: names.GPUClass}}},
			Config: []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
				Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: names.Driver,
					Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"GpuClaimParameters","sharing":{"strategy":"NoSuchStrategy"}}`)}},
			}}},
		}},
	}
	_, err := cs.ResourceV1().ResourceClaims(metav1.NamespaceDefault).Create(ctx, claim, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err == nil {
		return errors.New("the invalid claim was accepted: the webhook is not serving yet")
	}
	if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
		if strings.Contains(err.Error(), "NoSuchStrategy") {
			return nil
		}
	}
	return fmt.Errorf("unexpected answer: %w", err)
}
