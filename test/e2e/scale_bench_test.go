//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/gpudra/gpudra/internal/plugin/discovery"
	"github.com/gpudra/gpudra/internal/plugin/mig"
	"github.com/gpudra/gpudra/internal/plugin/slice"
	"github.com/gpudra/gpudra/test/sim"
)

// BenchmarkSchedulerScale measures how fast the real kube-scheduler of the
// local cluster allocates GPU claims across many nodes with gpudra's slice
// shape. It registers SCALE_NODES (120) Node objects without kubelets, each
// with the ResourceSlices the plugin publishes for a simulated DGX H100
// (built by internal/plugin/slice from the simulated NVML, as the plugin does), then
// creates SCALE_PODS (800) one-GPU claims and a pod for each, and waits until
// every pod is bound and its claim allocated. Reported: pods scheduled per
// second (allocation, claim status write, binding, from the first pod
// created to the last bound) and the time to create the pods. Afterwards it checks that no device was
// allocated twice, and removes everything it created.
//
//	make bench-scale   (or: go test -tags e2e -run '^$' -bench SchedulerScale -benchtime 1x ./test/e2e)
func BenchmarkSchedulerScale(b *testing.B) {
	nodes, pods := envInt(b, "SCALE_NODES", 120), envInt(b, "SCALE_PODS", 800)
	for _, shape := range scaleShapes() {
		b.Run(shape.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				runScale(b, shape, nodes, pods)
			}
		})
	}
}

// scaleShape builds the driver resources of one simulated node.
type scaleShape struct {
	name    string
	profile string
	build   func(nodeName string, srv *sim.Server) (resourceslice.DriverResources, error)
}

func scaleShapes() []scaleShape {
	build := func(mode mig.Mode) func(string, *sim.Server) (resourceslice.DriverResources, error) {
		return func(nodeName string, srv *sim.Server) (resourceslice.DriverResources, error) {
			node, err := discovery.Discover(context.Background(), srv, discovery.Options{})
			if err != nil {
				return resourceslice.DriverResources{}, err
			}
			mig.Apply(node, mode)
			return slice.Resources(nodeName, node, slice.Options{})
		}
	}
	return []scaleShape{
		{name: "whole-gpus", profile: "dgx-h100", build: build(mig.ModeStatic)},
		// Every GPU also offers every MIG placement, all on shared counters.
		{name: "dynamic-mig", profile: "dgx-h100", build: build(mig.ModeDynamic)},
	}
}

func envInt(b *testing.B, name string, def int) int {
	if v := os.Getenv(name); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("%s=%q: want a positive integer", name, v)
		}
		return n
	}
	return def
}

func runScale(b *testing.B, shape scaleShape, nodeCount, podCount int) {
	ctx := context.Background()
	b.StopTimer()
	prefix := fmt.Sprintf("scale-%d", time.Now().UnixNano()%100000)
	profile, err := sim.Load(shape.profile, nil)
	if err != nil {
		b.Fatal(err)
	}
	setupStart := time.Now()
	var nodeNames []string
	var sliceNames []string
	b.Cleanup(func() { cleanupScale(b, nodeNames, sliceNames) })
	for i := 0; i < nodeCount; i++ {
		name := fmt.Sprintf("%s-n%03d", prefix, i)
		nodeNames = append(nodeNames, name) // cleaned up even if creation fails half-way
		if err := createFakeNode(ctx, name, prefix); err != nil {
			b.Fatal(err)
		}
		srv := sim.NewServer(profile, name)
		if ret := srv.Init(); ret != nvml.SUCCESS {
			b.Fatalf("simulated NVML: %v", ret)
		}
		res, err := shape.build(name, srv)
		_ = srv.Shutdown()
		if err != nil {
			b.Fatal(err)
		}
		for _, s := range slice.Objects(driver, name, res) {
			created, err := client.ResourceV1().ResourceSlices().Create(ctx, &s, metav1.CreateOptions{})
			if err != nil {
				b.Fatalf("create slice of %s: %v", name, err)
			}
			sliceNames = append(sliceNames, created.Name)
		}
	}
	ns := benchNamespace(b)
	// One claim per pod, created up front: the scheduler, not the
	// controller-manager's claim-from-template path (20 QPS by default), is
	// what is measured.
	if err := forEachParallel(podCount, func(i int) error {
		_, err := client.ResourceV1().ResourceClaims(ns).Create(ctx, scaleClaim(fmt.Sprintf("c%04d", i)), metav1.CreateOptions{})
		return err
	}); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d nodes with %d slices and %d claims created in %v", nodeCount, len(sliceNames), podCount,
		time.Since(setupStart).Round(time.Millisecond))

	b.StartTimer()
	start := time.Now()
	if err := forEachParallel(podCount, func(i int) error {
		_, err := client.CoreV1().Pods(ns).Create(ctx, scalePod(fmt.Sprintf("p%04d", i), fmt.Sprintf("c%04d", i), prefix), metav1.CreateOptions{})
		return err
	}); err != nil {
		b.Fatal(err)
	}
	created := time.Since(start)
	bound := 0
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, nil
		}
		bound = 0
		for _, p := range list.Items {
			if p.Spec.NodeName != "" {
				bound++
			}
		}
		return bound == podCount, nil
	})
	elapsed := time.Since(start)
	b.StopTimer()
	if err != nil {
		b.Fatalf("%d of %d pods bound after %v", bound, podCount, elapsed)
	}
	b.ReportMetric(float64(podCount)/elapsed.Seconds(), "pods-scheduled/s")
	b.ReportMetric(float64(elapsed.Milliseconds()), "total-ms")
	b.ReportMetric(float64(created.Milliseconds()), "create-ms")
	checkScaleAllocations(b, ns, podCount)
}

// checkScaleAllocations asserts that every claim is allocated and that no
// device went to two claims.
func checkScaleAllocations(b *testing.B, ns string, podCount int) {
	claims, err := client.ResourceV1().ResourceClaims(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	seen := map[string]string{}
	allocated := 0
	for _, c := range claims.Items {
		if c.Status.Allocation == nil {
			continue
		}
		allocated++
		for _, r := range c.Status.Allocation.Devices.Results {
			id := r.Pool + "/" + r.Device
			if other, dup := seen[id]; dup {
				b.Fatalf("device %s allocated to claims %s and %s", id, other, c.Name)
			}
			seen[id] = c.Name
		}
	}
	if allocated != podCount {
		b.Fatalf("%d of %d claims allocated", allocated, podCount)
	}
}

// forEachParallel runs f(0..n-1) on 16 workers and returns the first error.
func forEachParallel(n int, f func(i int) error) error {
	var firstErr atomic.Value
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	err, _ := firstErr.Load().(error)
	return err
}

func scaleClaim(name string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.gpudra.io"}}},
		}},
	}
}

func scalePod(name, claimName, prefix string) *v1.Pod {
	claim := "gpu"
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PodSpec{
			NodeSelector: map[string]string{"gpudra.io/scale": prefix},
			// The nodes have no kubelet: once the node lifecycle controller
			// marks them unreachable, scheduling must still go on.
			Tolerations:    []v1.Toleration{{Operator: v1.TolerationOpExists}},
			Containers:     []v1.Container{{Name: "c", Image: "registry.example/cuda:12", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: claim}}}}},
			ResourceClaims: []v1.PodResourceClaim{{Name: claim, ResourceClaimName: &claimName}},
		},
	}
}

// noKubeletTaint keeps DaemonSet pods, the chart's plugin among them, off
// the Node objects that no kubelet serves (the benchmarks' pods tolerate
// it): on the containerd cluster the DaemonSet would otherwise add a plugin
// pod per fake node to what the scheduler and the API server do.
var noKubeletTaint = v1.Taint{Key: "gpudra.io/no-kubelet", Effect: v1.TaintEffectNoSchedule}

// createFakeNode registers a Ready node that no kubelet serves, labelled
// for the run's pods (gpudra.io/scale=<run>).
func createFakeNode(ctx context.Context, name, run string) error {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"kubernetes.io/hostname": name, "gpudra.io/scale": run,
	}}, Spec: v1.NodeSpec{Taints: []v1.Taint{noKubeletTaint}}}
	if _, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create node %s: %w", name, err)
	}
	res := v1.ResourceList{
		v1.ResourceCPU: resource.MustParse("128"), v1.ResourceMemory: resource.MustParse("2Ti"), v1.ResourcePods: resource.MustParse("110"),
	}
	// The node lifecycle controller writes to new nodes too: retry on conflict.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status.Capacity, cur.Status.Allocatable = res, res
		cur.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "FakeNode",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		_, err = client.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("mark node %s Ready: %w", name, err)
	}
	return nil
}

// cleanupScale removes the pods (force: no kubelet will ever confirm),
// slices and nodes of a run; the namespace goes with benchNamespace.
func cleanupScale(b *testing.B, nodeNames, sliceNames []string) {
	ctx := context.Background()
	zero := int64(0)
	onScaleNode := sets.New(nodeNames...)
	pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err == nil {
		for _, p := range pods.Items {
			if onScaleNode.Has(p.Spec.NodeName) {
				_ = client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
			}
		}
	}
	for _, s := range sliceNames {
		_ = client.ResourceV1().ResourceSlices().Delete(ctx, s, metav1.DeleteOptions{})
	}
	for _, n := range nodeNames {
		_ = client.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{})
	}
	b.Logf("removed %d nodes and %d slices", len(nodeNames), len(sliceNames))
}
