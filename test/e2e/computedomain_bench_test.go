//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/controller/computedomain"
	"github.com/gpudra/gpudra/internal/shared/compat"
)

// BenchmarkComputeDomain measures what NVIDIA's ComputeDomain users report
// as slow (kubernetes-sigs/dra-driver-nvidia-gpu #816, #1107, #1093): the
// time from creating a ComputeDomain and its workload's pods to every pod
// Running, and the conflicts (HTTP 409) and throttling (HTTP 429) of the
// controller's status writes on the way, against the domain's size. It adds
// CD_NODES (4) simulated GB200 NVL72 trays of one clique and installs the
// chart with computeDomains.enabled; each sub-benchmark nodes-<n> (n = 1,
// 2, 4, ... doubling, and CD_NODES itself) runs a domain of n trays with one pod on each (the default channel class
// selects channel 0, as NVIDIA's does, so a node holds one channel claim of
// a domain), every pod with one channel claim from the domain's template,
// then deletes pods and domain and waits until nothing of it is left.
// Reported: ready-s (create to all Running), domain-ready-s (create to the
// domain's status Ready with every node), pods, status-writes,
// status-conflicts, status-throttled, daemon-nudges (the controller's
// kubelet nudges of daemon pods whose DRA prepare failed, e.g. on the node
// authorizer's race: docs/computedomains.md).
//
//	make bench-computedomain   (or: go test -tags e2e -run '^$' -bench ComputeDomain -benchtime 1x ./test/e2e)
func BenchmarkComputeDomain(b *testing.B) {
	trays := envInt(b, "CD_NODES", 4)
	var nodes []string
	for i := range trays {
		n := fmt.Sprintf("cdb-%d", i)
		clusterCmd(b, "add-node", n+"=gb200-nvl72-tray")
		b.Cleanup(func() { clusterCmd(b, "remove-node", n) })
		nodes = append(nodes, n)
	}
	ctx := context.Background()
	if err := realCluster.InstallDriver(ctx, "computeDomains.enabled=true"); err != nil {
		b.Fatalf("install with computeDomains.enabled=true: %v", err)
	}
	b.Cleanup(func() {
		if err := realCluster.InstallDriver(context.Background()); err != nil {
			b.Errorf("reinstalling the chart without ComputeDomains: %v", err)
		}
	})
	for _, size := range domainSizes(trays) {
		b.Run(fmt.Sprintf("nodes-%d", size), func(b *testing.B) {
			for range b.N {
				runDomainJob(b, nodes[:size])
			}
		})
	}
}

// domainSizes are the domain sizes the benchmark runs on trays trays: the
// powers of two below trays, then trays.
func domainSizes(trays int) []int {
	var sizes []int
	for n := 1; n < trays; n *= 2 {
		sizes = append(sizes, n)
	}
	return append(sizes, trays)
}

func runDomainJob(b *testing.B, nodes []string) {
	ctx := context.Background()
	names := compat.Default().ComputeDomain()
	ns := namespace(b)
	url := controllerMetricsURL(b)
	before := scrapeFamilies(b, url)

	b.ResetTimer()
	start := time.Now()
	applyYAML(b, ns, computeDomain("bench", len(nodes), "Single"))
	for _, n := range nodes {
		if _, err := client.CoreV1().Pods(ns).Create(ctx, benchChannelPod("worker-"+n, n), metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	total := len(nodes)
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == v1.PodRunning {
				running++
			}
		}
		return running == total, nil
	})
	if err != nil {
		out, _ := kubectl("-n", ns, "get", "pods", "-o", "wide")
		b.Fatalf("%d pods of a %d-node domain not all Running: %v\n%s", total, len(nodes), err, out)
	}
	elapsed := time.Since(start)
	// Every pod runs once its own node's daemon was Ready, but a daemon
	// answers not ready while a node of its node list is not reachable yet
	// (nodes that joined later), so the domain turns Ready a little after.
	var cd *v1alpha1.ComputeDomain
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		cd = domainStatus(b, ns, "bench")
		return cd.Status.Status == v1alpha1.DomainReady && len(cd.Status.Nodes) == len(nodes), nil
	})
	if err != nil {
		b.Errorf("domain %s with %d nodes, want Ready with %d", cd.Status.Status, len(cd.Status.Nodes), len(nodes))
	}
	domainReady := time.Since(start)
	b.StopTimer()
	after := scrapeFamilies(b, url)
	writes := func(result string) float64 {
		return sumSeries(after, computedomain.MetricWrites, map[string]string{"object": "status", "result": result}) -
			sumSeries(before, computedomain.MetricWrites, map[string]string{"object": "status", "result": result})
	}
	b.ReportMetric(elapsed.Seconds(), "ready-s")
	b.ReportMetric(domainReady.Seconds(), "domain-ready-s")
	b.ReportMetric(float64(total), "pods")
	b.ReportMetric(writes("success"), "status-writes")
	b.ReportMetric(writes("conflict"), "status-conflicts")
	b.ReportMetric(writes("throttled"), "status-throttled")
	b.ReportMetric(sumSeries(after, computedomain.MetricNudges, nil)-sumSeries(before, computedomain.MetricNudges, nil), "daemon-nudges")
	b.Logf("%d-node domain, %d pods: all Running after %s, the domain Ready after %s", len(nodes), total,
		elapsed.Round(100*time.Millisecond), domainReady.Round(100*time.Millisecond))

	mustKubectl(b, "-n", ns, "delete", "pods", "--all", "--wait=true", "--timeout=5m")
	mustKubectl(b, "-n", ns, "delete", "computedomains.resource.gpudra.io", "bench", "--wait=true", "--timeout=2m")
	assertDomainGone(b, ns, cd, names, nodes)
}

// benchChannelPod is a pod on node with one claim from the bench domain's
// channel template, doing nothing.
func benchChannelPod(name, node string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PodSpec{
			NodeSelector:                  map[string]string{"kubernetes.io/hostname": node},
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []v1.Container{{Name: "ctr", Image: "registry.local/gpudra/workload:local", Command: []string{"sleep", "1d"},
				Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "channel"}}}}},
			ResourceClaims: []v1.PodResourceClaim{{Name: "channel", ResourceClaimTemplateName: ptr.To("bench-channel")}},
		},
	}
}

// sumSeries adds the values of the counters of name whose labels include
// labels.
func sumSeries(fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	var sum float64
	for _, m := range fams[name].GetMetric() {
		if seriesKey(m, labels, "") != "\x00" {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
