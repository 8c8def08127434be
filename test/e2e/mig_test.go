//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpudra/gpudra/internal/plugin/checkpoint"
	"github.com/gpudra/gpudra/test/fakedriver"
	"github.com/gpudra/gpudra/test/sim"
)

// The local cluster installs the chart with kubeletPlugin.mig=dynamic
// (localcluster.DefaultConfig): every plugin runs with --mig=dynamic.
const migPod = `
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: mig-1g10gb}
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
                device.attributes["gpu.gpudra.io"].profile == "1g.10gb" &&
                device.attributes["gpu.gpudra.io"].productName == "NVIDIA H100 80GB HBM3"
---
apiVersion: v1
kind: Pod
metadata: {name: mig-pod}
spec:
  containers:
  - name: cuda
    image: registry.local/gpudra/workload:local
    resources: {claims: [{name: mig}]}
  resourceClaims:
  - {name: mig, resourceClaimTemplateName: mig-1g10gb}
`

const migNode = "gpu-h100"

// simState is the simulated NVML state of the node's driver root: the MIG
// devices that exist on its GPUs (real GPUs keep them in the driver).
func simState(node string) string {
	return filepath.Join(driverRoot(node), fakedriver.StateFile)
}

// migDevicesInNVML asks `gpu-kubelet-plugin inspect` on the node's driver
// root (its simulated libnvidia-ml reads the MIG state) which MIG devices
// exist on the node.
func migDevicesInNVML(t *testing.T, node string) map[string]string {
	t.Helper()
	cmd := exec.Command(filepath.Join(repoRoot, "_output", "bin", "gpu-kubelet-plugin"), "inspect",
		"--nvidia-driver-root", driverRoot(node), "--node-name", node, "-o", "json")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("inspect: %v\n%s%s", err, out, stderr.String())
	}
	var ins struct {
		Node struct {
			GPUs []struct {
				UUID       string `json:"uuid"`
				MIGDevices []struct {
					UUID    string `json:"uuid"`
					Profile string `json:"profile"`
				} `json:"migDevices"`
			} `json:"gpus"`
		} `json:"node"`
	}
	if err := json.Unmarshal(out, &ins); err != nil {
		t.Fatalf("inspect output: %v", err)
	}
	devs := map[string]string{}
	for _, g := range ins.Node.GPUs {
		for _, m := range g.MIGDevices {
			devs[m.UUID] = m.Profile
		}
	}
	return devs
}

// containerEnv reads an environment variable of a pod's first container,
// from inside it.
func containerEnv(t *testing.T, podRef, key string) string {
	t.Helper()
	ns, name, _ := strings.Cut(podRef, "/")
	p := pod(t, ns, name)
	v, _ := injection(t, p, p.Spec.Containers[0].Name).Getenv(key)
	return v
}

// checkMIGEnv: the container is told its MIG device by the spec's
// GPUDRA_MIG_<minor>_<gi>_<ci> variable, and no NVIDIA_VISIBLE_DEVICES
// names a device (a legacy nvidia-container-runtime would inject it again).
func checkMIGEnv(t *testing.T, podRef string, m *checkpoint.MIG, migUUID string) {
	t.Helper()
	minor := strings.TrimPrefix(m.Parent, "gpu-")
	key := fmt.Sprintf("GPUDRA_MIG_%s_%d_%d", minor, m.GIID, m.CIID)
	if got := containerEnv(t, podRef, key); got != migUUID {
		t.Fatalf("the container sees %s=%q, want its MIG device %s", key, got, migUUID)
	}
	if got := containerEnv(t, podRef, "NVIDIA_VISIBLE_DEVICES"); got != "" && got != "void" {
		t.Fatalf("the container sees NVIDIA_VISIBLE_DEVICES=%q: gpudra sets it for no device", got)
	}
}

// clusterMIGDevices are the MIG devices of both nodes of the local cluster.
func clusterMIGDevices(t *testing.T) map[string]string {
	t.Helper()
	devs := migDevicesInNVML(t, migNode)
	for u, p := range migDevicesInNVML(t, "gpu-mixed") {
		devs[u] = p
	}
	return devs
}

func waitMIG(t *testing.T, what string, cond func(map[string]string) bool) map[string]string {
	t.Helper()
	var devs map[string]string
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		devs = clusterMIGDevices(t)
		return cond(devs), nil
	})
	if err != nil {
		t.Fatalf("%s: MIG devices in the simulated NVML: %v", what, devs)
	}
	return devs
}

// TestDynamicMIG: a 1g.10gb claim gets a MIG device created for it, the
// container sees exactly that device, it survives a plugin crash, a MIG
// device left behind by a crash is destroyed when the plugin comes back,
// and deleting the pod destroys the claim's device.
func TestDynamicMIG(t *testing.T) {
	if devs := clusterMIGDevices(t); len(devs) != 0 {
		t.Fatalf("the cluster starts with MIG devices; another test left them: %v", devs)
	}
	ns := namespace(t)
	applyYAML(t, ns, migPod)
	waitRunning(t, ns, "mig-pod")
	p := pod(t, ns, "mig-pod")
	claim, err := client.ResourceV1().ResourceClaims(ns).Get(context.Background(), *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	device := claim.Status.Allocation.Devices.Results[0].Device
	if !strings.Contains(device, "-mig-1g10gb-") {
		t.Fatalf("allocated %s, want a 1g.10gb MIG device", device)
	}
	rec := readRecord(t, migNode, string(claim.UID))
	migUUID := rec.Devices[0].UUID
	if !strings.HasPrefix(migUUID, "MIG-") || rec.Devices[0].MIG == nil || !rec.Devices[0].MIG.Dynamic {
		t.Fatalf("checkpoint record of %s: %+v", device, rec.Devices[0])
	}
	devs := migDevicesInNVML(t, migNode)
	if devs[migUUID] != "1g.10gb" || len(devs) != 1 {
		t.Fatalf("while the pod runs, NVML must have exactly its 1g.10gb device %s: %v", migUUID, devs)
	}
	checkMIGEnv(t, ns+"/mig-pod", rec.Devices[0].MIG, migUUID)

	// A plugin crash keeps the running pod's MIG device.
	clusterCmd(t, "restart-plugin", migNode)
	if devs := migDevicesInNVML(t, migNode); devs[migUUID] == "" || len(devs) != 1 {
		t.Fatalf("after a plugin restart: %v, want only %s", devs, migUUID)
	}

	// A MIG device nobody accounts for (what a crash between creating it and
	// recording the claim leaves) is destroyed when the plugin starts.
	clusterCmd(t, "stop-plugin", migNode)
	orphan := createOrphanMIG(t)
	clusterCmd(t, "start-plugin", migNode)
	devs = waitMIG(t, "orphan destroyed", func(d map[string]string) bool { return d[orphan] == "" })
	if devs[migUUID] == "" {
		t.Fatalf("the restarted plugin destroyed the running pod's MIG device: %v", devs)
	}

	deletePod(t, ns, "mig-pod")
	waitMIG(t, "pod deleted", func(d map[string]string) bool { return len(d) == 0 })
	fileGone(t, filepath.Join(checkpointDir(migNode), string(claim.UID)+".json"))
}

// createOrphanMIG creates a 1g.10gb device on the last GPU of the stopped
// plugin's simulated NVML, through NVML calls on its state file.
func createOrphanMIG(t *testing.T) string {
	t.Helper()
	p, err := sim.Load("dgx-h100", nil)
	if err != nil {
		t.Fatal(err)
	}
	s := sim.NewServer(p, migNode)
	if err := s.PersistTo(simState(migNode)); err != nil {
		t.Fatal(err)
	}
	if ret := s.Init(); ret != nvml.SUCCESS {
		t.Fatalf("init simulated NVML: %v", ret)
	}
	defer func() { _ = s.Shutdown() }()
	dev, _ := s.DeviceGetHandleByIndex(7)
	if ret, _ := dev.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
		t.Fatalf("enable MIG: %v", ret)
	}
	info, _ := dev.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	gi, ret := dev.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: 6, Size: 1})
	if ret != nvml.SUCCESS {
		t.Fatalf("create GPU instance: %v", ret)
	}
	ciInfo, _ := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if _, ret := gi.CreateComputeInstance(&ciInfo); ret != nvml.SUCCESS {
		t.Fatalf("create compute instance: %v", ret)
	}
	m, _ := dev.GetMigDeviceHandleByIndex(0)
	uuid, _ := m.GetUUID()
	if _, ok := migDevicesInNVML(t, migNode)[uuid]; !ok {
		t.Fatalf("orphan %s not in the state file", uuid)
	}
	return uuid
}

// TestDemoDynamicMIG runs demo scenario 09: two pods get three MIG devices
// (a 3g.40gb and a 1g.10gb on one GPU for one of them), all gone afterwards.
func TestDemoDynamicMIG(t *testing.T) {
	ns := namespace(t)
	applySpec(t, ns, spec("09-dynamic-mig.yaml"))
	waitRunning(t, ns, "mig-inference", "mig-pair")
	devs := clusterMIGDevices(t)
	profiles := map[string]int{}
	for _, p := range devs {
		profiles[p]++
	}
	if profiles["1g.10gb"] != 2 || profiles["3g.40gb"] != 1 || len(devs) != 3 {
		t.Fatalf("MIG devices while the pods run: %v", devs)
	}
	for _, name := range []string{"mig-inference", "mig-pair"} {
		deletePod(t, ns, name)
	}
	waitMIG(t, "pods deleted", func(d map[string]string) bool { return len(d) == 0 })
}
