package e2elogs

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestKeeper(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	dir := t.TempDir()
	var opens atomic.Int32
	// Each open of a container's log gives one more line, with the time of
	// the open's number, as a container that keeps logging would.
	open := func(pod, container string) Opener {
		return func(_ context.Context, since *time.Time) (io.ReadCloser, error) {
			n := opens.Add(1)
			line := fmt.Sprintf("%s %s/%s line %d\n", time.Date(2026, 11, 29, 14, 0, int(n), 0, time.UTC).Format(time.RFC3339Nano), pod, container, n)
			return io.NopCloser(strings.NewReader(line)), nil
		}
	}
	k, err := start(ctx, cs, "gpudra-system", dir, open, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "plugin-x", Namespace: "gpudra-system", UID: "u1"},
		Status: corev1.PodStatus{
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "init", ContainerID: "containerd://a"}},
			ContainerStatuses: []corev1.ContainerStatus{
				{Name: "plugin", ContainerID: "containerd://b"},
				{Name: "waiting"}, // never started: no log to follow
			},
		},
	}
	other := pod.DeepCopy()
	other.Name, other.Namespace, other.UID = "elsewhere", "default", "u2"
	for _, p := range []*corev1.Pod{pod, other} {
		if _, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool { return lines(dir, "plugin-x_plugin.log") >= 2 && lines(dir, "plugin-x_init.log") >= 2 })
	if err := cs.CoreV1().Pods("gpudra-system").Delete(ctx, "plugin-x", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The streams stop a little after the pod is gone: the log stops
	// growing (each open of the fake log adds a line every 10 ms while a
	// stream lives). Polled, not timed: a slow machine only waits longer.
	deleted := time.Now()
	for deadline := deleted.Add(gone + 10*time.Second); ; {
		before := lines(dir, "plugin-x_plugin.log")
		time.Sleep(100 * time.Millisecond)
		if lines(dir, "plugin-x_plugin.log") == before && time.Since(deleted) > gone+100*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the deleted pod's log still grows %v after the deletion", time.Since(deleted))
		}
	}
	names, _ := filepath.Glob(filepath.Join(dir, "*"))
	for i := range names {
		names[i] = filepath.Base(names[i])
	}
	if want := "plugin-x_init.log plugin-x_plugin.log"; strings.Join(names, " ") != want {
		t.Errorf("kept %v, want %s (no other namespace's pod, no unstarted container)", names, want)
	}
}

func lines(dir, name string) int {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return 0
	}
	return strings.Count(string(b), "\n")
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
