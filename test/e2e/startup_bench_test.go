//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
)

// BenchmarkPluginStartup starts a plugin process (simulated dgx-h100, shipped
// defaults) for a node that has no ResourceSlice yet and measures the time
// from exec to dra.sock served and to its ResourceSlice visible in the API
// (a watch event). Each iteration deletes the slice first.
//
//	go test -tags e2e -run '^$' -bench PluginStartup -benchtime 5x ./test/e2e
func BenchmarkPluginStartup(b *testing.B) {
	const node = "gpu-start"
	ctx := context.Background()
	fakeNode(b, node)
	selector := metav1.ListOptions{FieldSelector: resourceapi.ResourceSliceSelectorNodeName + "=" + node}
	var toSocket, toSlice []time.Duration
	for i := 0; i < b.N; i++ {
		_ = client.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{}, selector)
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			l, err := client.ResourceV1().ResourceSlices().List(ctx, selector)
			return err == nil && len(l.Items) == 0, nil
		}); err != nil {
			b.Fatalf("slices of %s not deleted: %v", node, err)
		}
		w, err := client.ResourceV1().ResourceSlices().Watch(ctx, selector)
		if err != nil {
			b.Fatal(err)
		}
		p := startBenchPlugin(b, node, false)
		seen := waitSliceAdded(b, w, p)
		toSocket = append(toSocket, p.served.Sub(p.started))
		toSlice = append(toSlice, seen.Sub(p.started))
		if i == b.N-1 {
			// Once the helper's ResourceSlice controller has synced (≥ 1 s),
			// the slice the plugin published first must still be the only one:
			// the controller adopted it instead of replacing it.
			time.Sleep(2 * time.Second)
			l, err := client.ResourceV1().ResourceSlices().List(ctx, selector)
			if err != nil || len(l.Items) != 1 || l.Items[0].Spec.Pool.Generation != 1 {
				b.Fatalf("after start-up want one slice of generation 1 for %s, got %v (err %v)", node, l, err)
			}
		}
		p.stop()
	}
	b.ReportMetric(median(toSocket), "start-to-socket-ms")
	b.ReportMetric(median(toSlice), "start-to-slice-ms")
	b.ReportMetric(float64(slices.Max(toSlice).Microseconds())/1000, "start-to-slice-max-ms")
}

func waitSliceAdded(b *testing.B, w watch.Interface, p *benchPlugin) time.Time {
	defer w.Stop()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev := <-w.ResultChan():
			if ev.Type == watch.Added {
				return time.Now()
			}
		case <-timeout:
			log, _ := os.ReadFile(p.log)
			b.Fatalf("no ResourceSlice for %s within 30s; plugin log:\n%s", p.node, log)
		}
	}
}

func median(d []time.Duration) float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[len(s)/2].Microseconds()) / 1000
}

// BenchmarkControllerMemory reads the gpu-controller's resident memory once
// it is idle, then has its webhook check 200 claims with GpuClaimParameters
// and reads its peak resident memory.
//
//	go test -tags e2e -run '^$' -bench ControllerMemory -benchtime 1x ./test/e2e
//
// It measures the chart's controller pod (one replica, webhook for every
// namespace but kube-system), which has run since the driver was installed.
func BenchmarkControllerMemory(b *testing.B) {
	ns := benchNamespace(b)
	pids, err := realCluster.ControllerPIDs()
	if err != nil || len(pids) != 1 {
		b.Fatalf("gpu-controller processes of the chart's pod: %v (%v), want one", pids, err)
	}
	pid := pids[0]
	waitWebhookEffective(b, ns)
	time.Sleep(5 * time.Second)
	idle := procMiB(b, pid, "VmRSS")
	// The pod has run since the install: its peak so far is whatever the
	// e2e tests before did on this cluster. Reset it (proc(5), clear_refs
	// "5") so that the peak is that of the reviews below.
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		b.Fatalf("reset the controller's peak RSS: %v", err)
	}
	for i := 0; i < 200; i++ {
		c := decodeClaim(b, claimWithConfig(fmt.Sprintf("c%d", i), driver, goodParams, false))
		if _, err := client.ResourceV1().ResourceClaims(ns).Create(context.Background(), c, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(idle, "rss-idle-MiB")
	b.ReportMetric(procMiB(b, pid, "VmHWM"), "rss-peak-MiB")
}
