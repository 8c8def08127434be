//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/pkg/plugin"
	"github.com/gpudra/gpudra/pkg/slice"
)

const scaleLabel = "gpudra.io/scale-bench"

// BenchmarkSchedulerScale measures the real kube-scheduler of the local
// cluster allocating GPUs from gpudra's slices at scale: BENCH_SCALE_NODES
// (100) Node objects without kubelets, each with the ResourceSlice the
// plugin publishes for a simulated dgx-h100 (pkg/slice, as the plugin builds
// it: 8 GPUs), and BENCH_SCALE_CLAIMS (800) one-GPU claims, each used by
// one pod. It reports claims allocated per second from the first pod
// created until every claim is allocated. The pods never run (no kubelet).
// The slices are today's shape (whole GPUs); dynamic-MIG partitions are not
// in pkg/slice yet.
//
//	go test -tags e2e -run '^$' -bench SchedulerScale -benchtime 1x ./test/e2e
func BenchmarkSchedulerScale(b *testing.B) {
	nodes, claims := envInt("BENCH_SCALE_NODES", 100), envInt("BENCH_SCALE_CLAIMS", 800)
	b.Run("whole-gpus", func(b *testing.B) {
		if b.N > 1 {
			b.Skip("one run is the measurement: use -benchtime 1x")
		}
		ctx := context.Background()
		fast := unthrottledClient(b)
		ns := benchNamespace(b)
		b.Cleanup(func() { cleanupScale(fast, ns) })
		createScaleNodes(b, fast, nodes)
		for i := 0; i < claims; i++ {
			c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c%d", i)},
				Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
					Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.gpudra.io"}}}}}}
			if _, err := fast.ResourceV1().ResourceClaims(ns).Create(ctx, c, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		start := time.Now()
		parallel(b, claims, func(i int) error {
			name := fmt.Sprintf("c%d", i)
			p := &v1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: v1.PodSpec{
					NodeSelector:   map[string]string{scaleLabel: "true"},
					Tolerations:    []v1.Toleration{{Operator: v1.TolerationOpExists}},
					Containers:     []v1.Container{{Name: "c", Image: "registry.example/cuda:12", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpu"}}}}},
					ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &name}},
				},
			}
			_, err := fast.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
			return err
		})
		created := time.Since(start)
		allocated := 0
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
			l, err := fast.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			allocated = 0
			for _, c := range l.Items {
				if c.Status.Allocation != nil {
					allocated++
				}
			}
			return allocated == claims, nil
		})
		total := time.Since(start)
		if err != nil {
			b.Fatalf("%d of %d claims allocated after %v", allocated, claims, total)
		}
		b.ReportMetric(float64(claims)/total.Seconds(), "claims/s")
		b.ReportMetric(total.Seconds(), "total-s")
		b.ReportMetric(created.Seconds(), "pods-created-s")
		b.ReportMetric(float64(nodes), "nodes")
	})
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func unthrottledClient(b *testing.B) kubernetes.Interface {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		b.Fatal(err)
	}
	cfg.QPS = -1
	return kubernetes.NewForConfigOrDie(cfg)
}

// parallel runs f for 0..n-1 on 8 workers and fails on the first error.
func parallel(b *testing.B, n int, f func(i int) error) {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int, n)
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	for w := 0; w < 8; w++ {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// createScaleNodes creates n Ready-looking nodes labelled scaleLabel, each
// with the ResourceSlice the plugin would publish for a dgx-h100.
func createScaleNodes(b *testing.B, c kubernetes.Interface, n int) {
	ctx := klog.NewContext(context.Background(), klog.Background().V(1))
	gpus, err := plugin.OpenNode(ctx, &plugin.Options{Simulate: "dgx-h100"})
	if err != nil {
		b.Fatal(err)
	}
	defer gpus.Close()
	parallel(b, n, func(i int) error {
		name := fmt.Sprintf("scale-%03d", i)
		node, err := c.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels: map[string]string{scaleLabel: "true", "kubernetes.io/hostname": name}}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		capacity := v1.ResourceList{v1.ResourceCPU: resource.MustParse("64"), v1.ResourceMemory: resource.MustParse("512Gi"),
			v1.ResourcePods: resource.MustParse("110")}
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			n.Status.Capacity, n.Status.Allocatable = capacity, capacity
			n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue,
				LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(), Reason: "Benchmark"}}
			_, err = c.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
			return err
		}); err != nil {
			return err
		}
		res, err := slice.Resources(name, gpus.Node, slice.Options{MaxDevicesPerSlice: 128})
		if err != nil {
			return err
		}
		for _, s := range slice.Objects(driver, name, res) {
			s.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: name, UID: node.UID}}
			if _, err := c.ResourceV1().ResourceSlices().Create(ctx, &s, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		return nil
	})
}

// cleanupScale force-deletes the pods (no kubelet will ever stop them), then
// the claims and the nodes (their slices go with them, by owner).
func cleanupScale(c kubernetes.Interface, ns string) {
	ctx := context.Background()
	zero := int64(0)
	_ = c.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
	_ = c.ResourceV1().ResourceClaims(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	_ = c.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: scaleLabel + "=true"})
	if l, err := c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{}); err == nil {
		for _, s := range l.Items {
			if s.Spec.NodeName != nil && len(*s.Spec.NodeName) > 6 && (*s.Spec.NodeName)[:6] == "scale-" {
				_ = c.ResourceV1().ResourceSlices().Delete(ctx, s.Name, metav1.DeleteOptions{})
			}
		}
	}
}
