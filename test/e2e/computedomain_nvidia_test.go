//go:build e2e

package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpudra/gpudra/internal/shared/compat"
)

// testNVIDIAComputeDomains (a part of TestComputeDomains) installs the chart with compatibility=nvidia and
// computeDomains.enabled on the simulated rack and runs NVIDIA-format
// ComputeDomain manifests (testdata/nvidia/imex-*.yaml: NVIDIA's group
// resource.nvidia.com/v1beta1, its driver compute-domain.nvidia.com and
// class names) with only the image changed and the pods pinned to trays:
// a one-channel and an all-channels domain, then a two-node job whose
// workers each take the four GPUs of their tray (gpu.nvidia.com) and a
// channel.
func testNVIDIAComputeDomains(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := realCluster.InstallDriver(ctx, "compatibility=nvidia", "computeDomains.enabled=true"); err != nil {
		t.Fatalf("install with compatibility=nvidia computeDomains.enabled=true: %v", err)
	}
	prev := driver
	driver = compat.NVIDIADriverName
	t.Cleanup(func() { driver = prev })
	names := compat.MustResolve(compat.Flags{Compatibility: "nvidia"}).ComputeDomain()
	const resource = "computedomains.resource.nvidia.com"

	ns := namespace(t)
	applyYAML(t, ns, pinnedToNodes(t, nvidiaManifest(t, "imex-channels.yaml"),
		map[string][]string{"one-channel": {cdClique1[0]}, "every-channel": {cdClique2}}))
	waitRunning(t, ns, "one-channel", "every-channel")
	one, every := domainIn(t, resource, ns, "one-channel"), domainIn(t, resource, ns, "every-channel")
	assertDomainNodes(t, one, []string{cdClique1[0]}, rackClique1)
	assertDomainNodes(t, every, []string{cdClique2}, rackClique2)
	assertNodeLabel(t, cdClique1[0], names.Label, string(one.UID))
	assertOneChannel(t, ns, "one-channel")
	if got, want := len(channelNodes(t, ns, "every-channel")), nodeChannels(t, names.Driver, cdClique2); got != want {
		t.Errorf("every-channel (allocationMode All) sees %d channel device nodes, its node publishes %d", got, want)
	}
	mustKubectl(t, "-n", ns, "delete", "pods", "--all", "--wait=true", "--timeout=2m")
	mustKubectl(t, "-n", ns, "delete", resource, "--all", "--wait=true", "--timeout=2m")
	assertDomainGone(t, ns, one, names, rackNodes())
	assertDomainGone(t, ns, every, names, rackNodes())

	applyYAML(t, ns, pinnedToNodes(t, nvidiaManifest(t, "imex-job.yaml"), map[string][]string{"two-trays": cdClique1}))
	workers := waitDeployment(t, ns, "app=two-trays", 2)
	var on []string
	for _, w := range workers {
		on = append(on, w.Spec.NodeName)
		var gpus int
		for _, d := range claimResults(t, &w) {
			if strings.HasPrefix(d, "gpu-") {
				gpus++
			}
		}
		if gpus != 4 {
			t.Errorf("%s: %d GPUs allocated, want its tray's 4", w.Name, gpus)
		}
		assertOneChannel(t, ns, w.Name)
	}
	if !sameSet(on, cdClique1) {
		t.Errorf("workers on %v, want one on each of %v", on, cdClique1)
	}
	job := domainIn(t, resource, ns, "two-trays")
	assertDomainNodes(t, job, cdClique1, rackClique1)
	mustKubectl(t, "-n", ns, "delete", "deployment", "two-trays", "--wait=true", "--timeout=2m")
	mustKubectl(t, "-n", ns, "delete", "pods", "--all", "--wait=true", "--timeout=2m")
	mustKubectl(t, "-n", ns, "delete", resource, "two-trays", "--wait=true", "--timeout=2m")
	assertDomainGone(t, ns, job, names, rackNodes())
}

// pinnedToNodes gives the Pods and Deployments of manifest named in nodes
// a required node affinity to those nodes (the local cluster has nodes of
// other GPU models and cliques that a real job's affinity would exclude).
func pinnedToNodes(t *testing.T, manifest string, nodes map[string][]string) string {
	t.Helper()
	return editManifest(t, manifest, func(obj map[string]any) {
		name, _ := obj["metadata"].(map[string]any)["name"].(string)
		on, ok := nodes[name]
		if !ok {
			return
		}
		var podSpec map[string]any
		switch obj["kind"] {
		case "Pod":
			podSpec = obj["spec"].(map[string]any)
		case "Deployment":
			podSpec = obj["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		default:
			return
		}
		affinity, _ := podSpec["affinity"].(map[string]any)
		if affinity == nil {
			affinity = map[string]any{}
		}
		affinity["nodeAffinity"] = map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{
			"nodeSelectorTerms": []any{map[string]any{"matchExpressions": []any{map[string]any{
				"key": "kubernetes.io/hostname", "operator": "In", "values": slices.Clone(on)}}}}}}
		podSpec["affinity"] = affinity
	})
}
