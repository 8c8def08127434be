//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/gpudra/gpudra/test/images"
)

// BenchmarkPodCreateToRunning measures, on the local cluster, the time from
// creating a pod to seeing it Running, for a pod with a one-GPU claim and an
// identical pod without one, on the same node. Pods are created one at a
// time; each is deleted (and its GPU freed) before the next. A third case
// uses a claim created before the pod (not timed), which leaves out the
// controller-manager creating the claim from the template.
//
//	make bench-cluster   (or: go test -tags e2e -run '^$' -bench PodCreate -benchtime 50x ./test/e2e)
func BenchmarkPodCreateToRunning(b *testing.B) {
	for _, tc := range []struct {
		name                string
		withClaim, existing bool
	}{{"without-claim", false, false}, {"with-claim", true, false}, {"with-existing-claim", true, true}} {
		withClaim := tc.withClaim
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			ns := benchNamespace(b)
			if withClaim {
				rct := &resourceapi.ResourceClaimTemplate{
					ObjectMeta: metav1.ObjectMeta{Name: "one-gpu"},
					Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
						Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.gpudra.io"}}},
					}}},
				}
				if _, err := client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, rct, metav1.CreateOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p := benchPod(fmt.Sprintf("p%d", i), withClaim)
				if tc.existing {
					b.StopTimer()
					claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: p.Name},
						Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
							Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.gpudra.io"}}}}}}
					if _, err := client.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
						b.Fatal(err)
					}
					p.Spec.ResourceClaims[0].ResourceClaimTemplateName = nil
					p.Spec.ResourceClaims[0].ResourceClaimName = &claim.Name
					b.StartTimer()
				}
				w, err := client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + p.Name})
				if err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				if _, err := client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
					b.Fatal(err)
				}
				waitWatchRunning(b, w)
				lat = append(lat, time.Since(start))
				b.StopTimer()
				// A graceful delete, as users do: the pod object goes away only
				// after the kubelet has stopped it and unprepared its claim.
				_ = client.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{})
				waitGone(b, ns, p.Name)
				if tc.existing {
					_ = client.ResourceV1().ResourceClaims(ns).Delete(ctx, p.Name, metav1.DeleteOptions{})
				}
				b.StartTimer()
			}
			slices.Sort(lat)
			at := func(p float64) float64 {
				return float64(lat[min(len(lat)-1, int(float64(len(lat))*p))].Microseconds()) / 1000
			}
			b.ReportMetric(at(0.5), "p50-ms")
			b.ReportMetric(at(0.9), "p90-ms")
			b.ReportMetric(at(0.99), "p99-ms")
		})
	}
}

func benchPod(name string, withClaim bool) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PodSpec{
			NodeSelector: map[string]string{"kubernetes.io/hostname": "gpu-h100"},
			Containers:   []v1.Container{{Name: "c", Image: images.WorkloadImage}},
		},
	}
	if withClaim {
		p.Spec.Containers[0].Resources.Claims = []v1.ResourceClaim{{Name: "gpu"}}
		tmpl := "one-gpu"
		p.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: &tmpl}}
	}
	return p
}

func waitWatchRunning(b *testing.B, w watch.Interface) {
	defer w.Stop()
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case ev := <-w.ResultChan():
			if p, ok := ev.Object.(*v1.Pod); ok && p.Status.Phase == v1.PodRunning {
				return
			}
		case <-timeout:
			b.Fatal("pod not Running within 2 minutes")
		}
	}
}

func waitGone(b *testing.B, ns, name string) {
	for i := 0; i < 600; i++ {
		if _, err := client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{}); err != nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.Fatalf("pod %s/%s not deleted", ns, name)
}

func benchNamespace(b *testing.B) string {
	name := fmt.Sprintf("bench-%d", time.Now().UnixNano()%1000000)
	ctx := context.Background()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	for i := 0; i < 120; i++ {
		if _, err := client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			return name
		}
		time.Sleep(250 * time.Millisecond)
	}
	b.Fatal("default ServiceAccount missing")
	return ""
}
