//go:build e2e

package e2e

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

const bigMIGPod = `
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: mig-3g40gb}
spec:
  spec:
    devices:
      requests:
      - name: mig
        exactly:
          deviceClassName: mig.gpudra.io
          selectors:
          - cel:
              expression: >-
                device.attributes["gpu.gpudra.io"].profile == "3g.40gb" &&
                device.attributes["gpu.gpudra.io"].productName == "NVIDIA H100 80GB HBM3"
---
apiVersion: v1
kind: Pod
metadata: {name: mig-big}
spec:
  terminationGracePeriodSeconds: 5
  containers:
  - {name: cuda, image: registry.local/gpudra/workload:local, resources: {claims: [{name: mig}]}}
  resourceClaims:
  - {name: mig, resourceClaimTemplateName: mig-3g40gb}
`

// TestMIGProfilesChangedWithMIGClaimPrepared (issue 13): a pod runs on a
// dynamic 3g.40gb MIG device, then `helm upgrade` sets
// kubeletPlugin.migProfiles={1g.10gb}, so the prepared device's profile is
// no longer published. The new plugin's start-up recovery accounts for the
// device (no RecoverFailed event, the gauge at 0), the pod keeps running,
// deleting it unprepares it (the MIG device destroyed, record and CDI spec
// gone, the whole GPU allocatable again) and a new 1g.10gb claim is
// prepared. Before the fix (f6bf2eb) --mig-profiles replaced the GPU's MIG
// geometry, recovery did not see the 3g.40gb instance and failed the claim
// ("MIG device ... is no longer published").
func TestMIGProfilesChangedWithMIGClaimPrepared(t *testing.T) {
	if devs := clusterMIGDevices(t); len(devs) != 0 {
		t.Fatalf("the cluster starts with MIG devices; another test left them: %v", devs)
	}
	ctx := context.Background()
	ns := namespace(t)
	applyYAML(t, ns, bigMIGPod)
	waitRunning(t, ns, "mig-big")
	p := pod(t, ns, "mig-big")
	claim, err := client.ResourceV1().ResourceClaims(ns).Get(ctx, *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	uid := string(claim.UID)
	rec := readRecord(t, migNode, uid)
	dev := rec.Devices[0]
	if dev.MIG == nil || !dev.MIG.Dynamic || !strings.Contains(dev.Name, "-mig-3g40gb-") {
		t.Fatalf("checkpoint record of the claim: %+v, want a dynamic 3g.40gb MIG device", dev)
	}
	if devs := migDevicesInNVML(t, migNode); devs[dev.UUID] != "3g.40gb" {
		t.Fatalf("NVML has no 3g.40gb device %s: %v", dev.UUID, devs)
	}
	oldPlugin, err := realCluster.PluginPod(ctx, migNode)
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() {
		// The chart's default again: every profile published.
		if err := realCluster.InstallDriver(context.Background()); err != nil {
			t.Errorf("helm upgrade back to the default values: %v", err)
		}
	})
	start := time.Now()
	if err := realCluster.InstallDriver(ctx, "kubeletPlugin.migProfiles={1g.10gb}"); err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
	newPlugin, err := realCluster.PluginPod(ctx, migNode)
	if err != nil {
		t.Fatal(err)
	}
	if newPlugin.UID == oldPlugin.UID || !slices.Contains(pluginArgs(newPlugin), "--mig-profiles=1g.10gb") {
		t.Fatalf("the upgrade did not replace the plugin pod of %s with one run with --mig-profiles=1g.10gb: %s %v",
			migNode, newPlugin.Name, pluginArgs(newPlugin))
	}
	if !podReady(newPlugin) {
		t.Fatalf("plugin pod %s is not Ready after the rollout", newPlugin.Name)
	}
	t.Logf("rolled out in %s: %s replaced %s", time.Since(start).Round(time.Millisecond), newPlugin.Name, oldPlugin.Name)
	// The new pod publishes once the old one has stopped (one publisher
	// per node): wait for the restricted set.
	var published map[string]bool
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		published = map[string]bool{}
		for _, d := range sliceDeviceTaints(t, migNode) {
			if _, prof, ok := strings.Cut(d.Name, "-mig-"); ok {
				prof, _, _ = strings.Cut(prof, "-")
				published[prof] = true
			}
		}
		return published["1g10gb"] && len(published) == 1, nil
	}); err != nil {
		t.Fatalf("MIG profiles published after the upgrade: %v, want 1g10gb only", published)
	}

	// The recovery of the new plugin accounted for the prepared claim.
	if v := metricValue(t, migNode, "gpudra_plugin_recover_failed_claims"); v != 0 {
		t.Errorf("gpudra_plugin_recover_failed_claims = %v after the upgrade", v)
	}
	noRecoverFailed(t, ns)
	if got := pod(t, ns, "mig-big"); got.Status.Phase != v1.PodRunning {
		t.Fatalf("mig-big is %s after the upgrade", got.Status.Phase)
	}
	if devs := migDevicesInNVML(t, migNode); devs[dev.UUID] != "3g.40gb" {
		t.Fatalf("after the upgrade NVML has no 3g.40gb device %s of the running pod: %v", dev.UUID, devs)
	}

	// Unprepared by the new plugin: the device destroyed, nothing left.
	deletePod(t, ns, "mig-big")
	waitMIG(t, "mig-big deleted", func(d map[string]string) bool { return len(d) == 0 })
	fileGone(t, filepath.Join(checkpointDir(migNode), uid+".json"))
	fileGone(t, specPath(migNode, uid))

	// The parent GPU is free as a whole (its MIG mode can be turned off).
	applyYAML(t, ns, strings.ReplaceAll(`
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: whole}
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu.gpudra.io
        selectors:
        - cel: {expression: 'device.attributes["gpu.gpudra.io"].uuid == "PARENT"'}
---
apiVersion: v1
kind: Pod
metadata: {name: whole}
spec:
  terminationGracePeriodSeconds: 5
  containers:
  - {name: cuda, image: registry.local/gpudra/workload:local, resources: {claims: [{name: gpu}]}}
  resourceClaims:
  - {name: gpu, resourceClaimName: whole}
`, "PARENT", dev.MIG.ParentUUID))
	waitRunning(t, ns, "whole")
	deletePod(t, ns, "whole")

	// A MIG device of the published profile, prepared by the new plugin.
	applyYAML(t, ns, migPod)
	waitRunning(t, ns, "mig-pod")
	small := allocatedDevices(t, pod(t, ns, "mig-pod"))[0]
	if !strings.Contains(small.name, "-mig-1g10gb-") {
		t.Fatalf("mig-pod got %s, want a 1g.10gb MIG device", small.name)
	}
	devs := migDevicesInNVML(t, migNode)
	if len(devs) != 1 || !slices.Contains(mapValues(devs), "1g.10gb") {
		t.Fatalf("while mig-pod runs, NVML has %v, want its 1g.10gb device only", devs)
	}
	deletePod(t, ns, "mig-pod")
	waitMIG(t, "mig-pod deleted", func(d map[string]string) bool { return len(d) == 0 })
	noRecoverFailed(t, ns)
}

// noRecoverFailed fails when the plugin recorded a RecoverFailed event on a
// claim in ns.
func noRecoverFailed(t *testing.T, ns string) {
	t.Helper()
	evs, err := client.EventsV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.Reason == "RecoverFailed" {
			t.Errorf("RecoverFailed on %s %s: %s", e.Regarding.Kind, e.Regarding.Name, e.Note)
		}
	}
}

func pluginArgs(p *v1.Pod) []string {
	for _, c := range p.Spec.Containers {
		if c.Name == "plugin" {
			return c.Args
		}
	}
	return nil
}

func mapValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
