//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/plugin/slice"
	"github.com/gpudra/gpudra/internal/shared/compat"
	"github.com/gpudra/gpudra/test/fakedriver"
)

// fabricPoll is the GPU plugin's --fabric-poll-interval in
// testComputeDomainFabric's install (the chart's default is 30 s); the
// channel plugin reads the fabric every --fabric-retry-interval, 5 s.
const fabricPoll = "2s"

// fabricChangesWhileRunning continues testComputeDomainFabric on the tray
// cdPending, whose registration completed in clique 3 and whose domain's
// pod late-0 runs in namespace ns: the fabric changes under the running
// plugins (fault-file lines of test/sim). A GPU's bandwidth degrades: the GPU
// plugin republishes its fabricBandwidthDegraded, the channels and the pod
// stay. The registration starts over on all four GPUs: the channel plugin
// withdraws its channels (the daemon device stays) and is not Ready, the GPU
// devices lose their cliqueID, the running pod stays, its deletion is served
// (unprepare), and a new pod of the domain stays Pending. The registration
// completes again, as a fabric manager re-registering GPUs may, in another
// clique (5): the channels come back in clique 5, the GPUs' cliqueID follows,
// the new pod runs and the domain's status has the tray in clique 5.
func fabricChangesWhileRunning(t *testing.T, ns, pluginNS, pluginPod string) {
	names := compat.Default().ComputeDomain()
	faults := filepath.Join(driverRoot(cdPending), fakedriver.FaultFile)
	running := pod(t, ns, "late-0")

	appendFaults(t, faults, "gpu-1 fabric-health degraded-bandwidth")
	waitGPUFabric(t, "gpu-1 degraded", func(d resourceapi.Device) bool {
		deg := d.Attributes[slice.AttrFabricBandwidthDegraded].BoolValue
		return deg != nil && *deg == (d.Name == "gpu-1") && cliqueOf(d) == rackClique3
	})
	if n := len(channelDevices(t, names.Driver, cdPending)); n < 2 {
		t.Errorf("%s publishes %d channel driver devices after a GPU's bandwidth degraded, want its channels and daemon", cdPending, n)
	}
	appendFaults(t, faults, "gpu-1 fabric-health none")
	waitGPUFabric(t, "no GPU degraded", func(d resourceapi.Device) bool {
		deg := d.Attributes[slice.AttrFabricBandwidthDegraded].BoolValue
		return deg != nil && !*deg
	})

	var lines []string
	for i := range 4 {
		lines = append(lines, fmt.Sprintf("gpu-%d fabric in-progress", i))
	}
	startedOver := time.Now()
	appendFaults(t, faults, lines...)
	waitChannelDevices(t, "only the daemon device", func(devs []resourceapi.Device) bool {
		return len(devs) == 1 && devs[0].Name == "daemon-0"
	})
	t.Logf("%s: channels withdrawn %s after the registration started over", cdPending, time.Since(startedOver).Round(100*time.Millisecond))
	waitGPUFabric(t, "no cliqueID", func(d resourceapi.Device) bool { return cliqueOf(d) == "" })
	waitContainerReady(t, pluginNS, pluginPod, "compute-domain", false)
	if p := pod(t, ns, "late-0"); p.UID != running.UID || p.Status.Phase != v1.PodRunning {
		t.Errorf("late-0 is %s (UID %s, was %s) after the registration started over, want the same pod Running", p.Status.Phase, p.UID, running.UID)
	}
	deletePod(t, ns, "late-0") // its unprepare is served meanwhile
	applyYAML(t, ns, channelPod("late-1", "late", cdPending))
	time.Sleep(3 * time.Second) // retries of the scheduler; the channel plugin reads every 5 s
	if p := pod(t, ns, "late-1"); p.Status.Phase != v1.PodPending {
		t.Errorf("late-1 is %s while its node publishes no channel, want Pending", p.Status.Phase)
	}

	lines = lines[:0]
	for i := range 4 {
		lines = append(lines, fmt.Sprintf("gpu-%d fabric-clique 5", i), fmt.Sprintf("gpu-%d fabric completed", i))
	}
	completed := time.Now()
	appendFaults(t, faults, lines...)
	waitRunning(t, ns, "late-1")
	t.Logf("late-1 Running %s after the registration completed again", time.Since(completed).Round(100*time.Millisecond))
	waitChannelDevices(t, "channels in clique 5", func(devs []resourceapi.Device) bool {
		for _, d := range devs {
			if cliqueOf(d) != rackClique5 {
				return false
			}
		}
		return len(devs) > 1
	})
	waitGPUFabric(t, "cliqueID 5", func(d resourceapi.Device) bool { return cliqueOf(d) == rackClique5 })
	waitContainerReady(t, pluginNS, pluginPod, "compute-domain", true)
	waitDomainClique(t, ns, "late", rackClique5)
	logs, _ := kubectl("-n", pluginNS, "logs", pluginPod, "-c", "compute-domain")
	for _, want := range []string{"Withdrawing the node's IMEX channels", "clique of the node's GPUs changed"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the channel plugin's log on %s has no %q", cdPending, want)
		}
	}
}

func appendFaults(t *testing.T, path string, lines ...string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString(strings.Join(lines, "\n") + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("write the fault file %s: %v", path, err)
	}
}

func cliqueOf(d resourceapi.Device) string {
	if c := d.Attributes[slice.AttrCliqueID].StringValue; c != nil {
		return *c
	}
	return ""
}

// waitGPUFabric waits until every GPU device the GPU driver publishes on
// cdPending satisfies ok.
func waitGPUFabric(t *testing.T, what string, ok func(resourceapi.Device) bool) {
	t.Helper()
	waitDevicesOf(t, driver, what, func(devs []resourceapi.Device) bool {
		gpus := 0
		for _, d := range devs {
			if typ := d.Attributes[slice.AttrType].StringValue; typ == nil || *typ != slice.DeviceTypeGPU {
				continue // MIG devices carry no fabric attribute
			}
			if !ok(d) {
				return false
			}
			gpus++
		}
		return gpus == 4
	})
}

// waitChannelDevices waits until the channel driver's devices on cdPending
// satisfy ok.
func waitChannelDevices(t *testing.T, what string, ok func([]resourceapi.Device) bool) {
	t.Helper()
	waitDevicesOf(t, compat.Default().ComputeDomain().Driver, what, ok)
}

func waitDevicesOf(t *testing.T, drv, what string, ok func([]resourceapi.Device) bool) {
	t.Helper()
	var devs []resourceapi.Device
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
			FieldSelector: "spec.driver=" + drv + ",spec.nodeName=" + cdPending})
		if err != nil {
			return false, nil
		}
		devs = devs[:0]
		for _, s := range list.Items {
			devs = append(devs, s.Spec.Devices...)
		}
		return ok(devs), nil
	})
	if err != nil {
		var got []string
		for _, d := range devs {
			deg := d.Attributes[slice.AttrFabricBandwidthDegraded].BoolValue
			got = append(got, fmt.Sprintf("%s(clique %q, degraded %v)", d.Name, cliqueOf(d), deg != nil && *deg))
		}
		t.Fatalf("%s devices of %s on %s: want %s, got %v", drv, cdPending, cdPending, what, got)
	}
}

// waitDomainClique waits until the domain's status has cdPending, Ready,
// in clique.
func waitDomainClique(t *testing.T, ns, name, clique string) {
	t.Helper()
	var cd *v1alpha1.ComputeDomain
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		cd = domainStatus(t, ns, name)
		return cd.Status.Status == v1alpha1.DomainReady && len(cd.Status.Nodes) == 1 && cd.Status.Nodes[0].CliqueID == clique, nil
	})
	if err != nil {
		t.Fatalf("domain %s: want Ready with %s in clique %s: %v; status %+v", name, cdPending, clique, err, cd.Status)
	}
	assertDomainNodes(t, cd, []string{cdPending}, clique)
}

// waitContainerReady waits until the container's readiness is want.
func waitContainerReady(t *testing.T, ns, podName, container string, want bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		ready, ok := containerReady(t, ns, podName, container)
		return ok && ready == want, nil
	})
	if err != nil {
		t.Fatalf("container %s of %s/%s: want ready %v: %v", container, ns, podName, want, err)
	}
}
