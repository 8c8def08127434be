//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	metadatav1beta1 "k8s.io/dynamic-resource-allocation/api/metadata/v1beta1"

	"github.com/gpudra/gpudra/internal/plugin/vfio"
	"github.com/gpudra/gpudra/test/localcluster"
)

// podLog waits until the container's log has the marker line and returns it.
func podLog(t *testing.T, ns, name, marker string) string {
	t.Helper()
	return waitLogs(t, ns, name, "ctr", func(out string) bool { return strings.Contains(out, marker) })
}

// vfioNodes are the "vfio-node <path>" lines of vfioScript's output (a
// glob that matched nothing prints the pattern itself, left out).
func vfioNodes(out string) []string {
	var nodes []string
	for _, line := range strings.Split(out, "\n") {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "vfio-node "); ok && p != "/dev/vfio/*" {
			nodes = append(nodes, p)
		}
	}
	return nodes
}

// between is the text between the lines begin and end.
func between(out, begin, end string) string {
	_, rest, _ := strings.Cut(out, begin+"\n")
	text, _, _ := strings.Cut(rest, end)
	return text
}

// waitSysfs waits until the GPU at addr in node's fake root shows the driver
// link and driver_override, as the simulated kernel leaves them.
func waitSysfs(t *testing.T, node, addr, driver, override string) {
	t.Helper()
	sys := vfio.HostSysfs{Root: filepath.Join(driverRoot(node), "sys")}
	overrideFile := filepath.Join(driverRoot(node), "sys/bus/pci/devices", addr, "driver_override")
	var gotDriver, gotOverride string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		gotDriver, _ = sys.Driver(addr)
		b, _ := os.ReadFile(overrideFile)
		gotOverride = strings.TrimSpace(string(b))
		return gotDriver == driver && gotOverride == override, nil
	})
	if err != nil {
		t.Fatalf("GPU %s of %s: driver %q, driver_override %q; want %q, %q (the simulated kernel's log: %s)",
			addr, node, gotDriver, gotOverride, driver, override, realCluster.Log(localcluster.SimKernelName(node)))
	}
}

// assertPCIBusID decodes the first object of a metadata stream (KEP-5304,
// v1beta1) and checks the device's resource.kubernetes.io/pciBusID.
func assertPCIBusID(t *testing.T, what string, raw []byte, device, want string) {
	t.Helper()
	var md metadatav1beta1.DeviceMetadata
	if err := json.NewDecoder(bytes.NewReader(raw)).Decode(&md); err != nil && !errors.Is(err, io.EOF) {
		t.Errorf("%s: %v\n%s", what, err, raw)
		return
	}
	for _, r := range md.Requests {
		for _, d := range r.Devices {
			if d.Name != device {
				continue
			}
			if got := d.Attributes[vfio.PCIBusIDAttribute].StringValue; got == nil || *got != want {
				t.Errorf("%s: %s of %s is %v, want %s\n%s", what, vfio.PCIBusIDAttribute, device, got, want, raw)
			}
			return
		}
	}
	t.Errorf("%s: no device %s\n%s", what, device, raw)
}

// waitUnschedulable waits for the scheduler to report the pod unschedulable.
func waitUnschedulable(t *testing.T, ns, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if p.Spec.NodeName != "" {
			return false, fmt.Errorf("pod %s/%s was scheduled to %s", ns, name, p.Spec.NodeName)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse && c.Reason == v1.PodReasonUnschedulable {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		out, _ := kubectl("-n", ns, "describe", "pod", name)
		t.Fatalf("pod %s/%s: want it unschedulable: %v\n%s", ns, name, err, out)
	}
}

// deleteClaim deletes a claim and waits until it is gone (deallocated).
func deleteClaim(t *testing.T, ns, name string) {
	t.Helper()
	ctx := context.Background()
	if err := client.ResourceV1().ResourceClaims(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := client.ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("claim %s/%s not deleted: %v", ns, name, err)
	}
}
