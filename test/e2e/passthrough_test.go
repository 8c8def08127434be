//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	drametadata "k8s.io/dynamic-resource-allocation/api/metadata"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/internal/controller/deviceclass"
	"github.com/gpudra/gpudra/internal/plugin/slice"
	"github.com/gpudra/gpudra/internal/plugin/vfio"
	"github.com/gpudra/gpudra/internal/shared/compat"
	"github.com/gpudra/gpudra/test/fakedriver"
)

// TestPassthrough passes a GPU through on the local cluster (docs/passthrough.md):
// a node of its own, added with a node group whose plugin has --passthrough,
// publishes its two L4s also as vfio devices; a claim of class
// vfio.gpu.gpudra.io prepares: the plugin rebinds the GPU through the fake
// root's PCI sysfs, which the node's simulated kernel
// (test/cmd/gpudra-sim-kernel) acts on, so that its driver link shows
// vfio-pci and driver_override vfio-pci; the pod sees only
// /dev/vfio/<IOMMU group> of that GPU; the device metadata of KEP-5304 is
// written with the GPU's pciBusID and reaches the container. While the
// claim holds the GPU its ordinary device cannot be allocated; after the
// pod and the claim are gone the GPU is on nvidia again with no override,
// and a pod gets its ordinary device and sees the GPU.
//
// The node group passes --passthrough in extraArgs, not the chart's
// kubeletPlugin.passthrough, which the chart refuses without privileged
// (the plugin writes the host's sysfs): a privileged plugin here would mount
// the simulated driver root read-only (the chart's rule for a real root:
// the simulated NVML then cannot create its state file, nor the plugin
// write the fake sysfs), and its Bidirectional plugin directory needs a
// shared mount, which the nodes' /var/lib/kubelet is not. Neither was
// tried. In the native mode (subtest gpudra) the test creates the vfio
// DeviceClass the chart would install (the controller's own,
// deviceclass.BaseClassesFor); in the NVIDIA mode (subtest nvidia) the
// controller gets its --passthrough from controller.extraArgs.
//
// Only the success path: the simulated kernel acts after the plugin's write
// returned, so a refusal (EBUSY, ENODEV) cannot reach the plugin; those are
// covered by the in-process tests of test/fakedriver and internal/plugin/vfio.
func TestPassthrough(t *testing.T) {
	const node = "gpu-vfio"
	t.Cleanup(func() { clusterCmd(t, "remove-node", node) })
	// Two L4s on a node whose kernel offers iommufd (/dev/iommu): the
	// native claim has no configuration and gets the legacy backend, the
	// NVIDIA-format one asks for PreferIommuFD and gets the iommufd one.
	clusterCmd(t, "add-node", node+"="+filepath.Join(repoRoot, fakedriver.IOMMUFDProfilePath), "--passthrough")

	t.Run("gpudra", func(t *testing.T) {
		ensureVFIOClass(t)
		devs := waitVFIODevices(t, node, 2)
		ns := namespace(t)
		createClaim(t, ns, "vm-gpu", compat.NativeVFIOClass, "")
		createPod(t, ns, "vm", node, "vm-gpu", vfioScript("vm-gpu", "vm"))
		passThroughAndBack(t, ns, node, devs, compat.Default().GPUClass, legacyGroupOnly)
	})
	t.Run("nvidia", func(t *testing.T) { testNVIDIAPassthrough(t, node) })
}

// testNVIDIAPassthrough is the same in the compatibility mode, from an
// NVIDIA-format manifest (testdata/nvidia/vfio.yaml: a claim of class
// vfio.gpu.nvidia.com with a VfioDeviceConfig asking for the iommufd
// backend, PreferIommuFD, with its API device, and its pod). The controller gets --passthrough through
// controller.extraArgs, for the reason TestPassthrough gives: it then makes
// the class and its webhook accepts the VfioDeviceConfig. The native chart
// is installed again at the end.
func testNVIDIAPassthrough(t *testing.T, node string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	t.Cleanup(func() {
		if err := realCluster.InstallDriver(context.Background()); err != nil {
			t.Errorf("reinstalling the native chart: %v", err)
		}
		removeOtherDriversClasses(t, compat.NVIDIADriverName)
	})
	if err := realCluster.InstallDriver(ctx, "compatibility=nvidia", "controller.extraArgs={--passthrough}"); err != nil {
		t.Fatalf("install in NVIDIA compatibility mode with the controller's --passthrough: %v", err)
	}
	prev := driver
	driver = compat.NVIDIADriverName
	t.Cleanup(func() { driver = prev })
	names := compat.MustResolve(compat.Flags{Compatibility: "nvidia", Passthrough: true})
	waitDeviceClass(t, names.VFIOClass)
	devs := waitVFIODevices(t, node, 2)

	ns := namespace(t)
	manifest := nvidiaManifest(t, "vfio.yaml")
	if meta := drametadata.ResourceClaimFilePath(driver, "vm-gpu", "vm"); !strings.Contains(manifest, meta) {
		t.Fatalf("testdata/nvidia/vfio.yaml must print the device metadata at %s", meta)
	}
	applyYAML(t, ns, manifest)
	passThroughAndBack(t, ns, node, devs, names.GPUClass, iommufdWithAPIDevice)
}

// The VFIO device nodes a passed-through GPU's container is to see.
type vfioBackend int

const (
	// legacyGroupOnly: /dev/vfio/<IOMMU group> of the GPU.
	legacyGroupOnly vfioBackend = iota
	// iommufdWithAPIDevice: /dev/vfio/devices/vfio<N>, the cdev the kernel
	// made when vfio-pci bound the GPU (sysfs vfio-dev/vfio<N>), and the
	// iommufd API device /dev/iommu.
	iommufdWithAPIDevice
)

// passThroughAndBack follows the claim vm-gpu (request vm) of pod vm on
// node, created by the caller: the pod runs and sees the VFIO nodes of the
// backend of the allocated GPU, the fake root's sysfs shows the GPU on
// vfio-pci (with its cdev for iommufd), the device metadata with its pciBusID
// is on the node and in the container, the GPU's ordinary device (class
// gpuClass) cannot be allocated meanwhile; after pod and claim are deleted
// the GPU is on nvidia with no override and a pod gets its ordinary device.
func passThroughAndBack(t *testing.T, ns, node string, devs map[string]vfioDevice, gpuClass string, backend vfioBackend) {
	t.Helper()
	ctx := context.Background()
	waitRunning(t, ns, "vm")
	claim, err := client.ResourceV1().ResourceClaims(ns).Get(ctx, "vm-gpu", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 {
		t.Fatalf("claim vm-gpu: want one allocated device, got %+v", claim.Status.Allocation)
	}
	res := claim.Status.Allocation.Devices.Results[0]
	dev, ok := devs[res.Device]
	if res.Pool != node || !ok {
		t.Fatalf("claim vm-gpu got %s/%s, want a vfio device of %s (%v)", res.Pool, res.Device, node, devs)
	}
	group := fakedriver.IOMMUGroupBase + dev.index
	t.Logf("vm-gpu: %s, PCI %s, IOMMU group %d", res.Device, dev.pciBusID, group)

	out := podLog(t, ns, "vm", "end-of-report")
	waitSysfs(t, node, dev.pciBusID, vfio.DriverVFIO, vfio.DriverVFIO)
	sys := vfio.HostSysfs{Root: filepath.Join(driverRoot(node), "sys")}
	cdev, err := sys.CDev(dev.pciBusID)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	switch backend {
	case legacyGroupOnly:
		want = []string{vfio.GroupPath(group)}
	case iommufdWithAPIDevice:
		if cdev == "" || cdev == fmt.Sprintf("vfio%d", group) {
			t.Fatalf("GPU %s on vfio-pci: sysfs names cdev %q, want vfio<N> apart from the group %d", dev.pciBusID, cdev, group)
		}
		want = []string{vfio.CDevPath(cdev), vfio.IOMMUPath}
	}
	got := vfioNodes(out)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the VM's pod sees VFIO nodes %v, want %v (cdev %q)\n%s", got, want, cdev, out)
	}

	// Where the kubeletplugin helper writes it (k8s.io/dynamic-resource-allocation
	// kubeletplugin, metadataFilePath: <plugin data dir>/dra-device-metadata/<ns>_<claim>/<request>).
	hostMeta := filepath.Join(kubeletDir(node), "plugins", driver, "dra-device-metadata", ns+"_vm-gpu", "vm", "metadata.json")
	raw, err := os.ReadFile(hostMeta)
	if err != nil {
		t.Fatalf("device metadata on the node: %v", err)
	}
	assertPCIBusID(t, "metadata file "+hostMeta, raw, res.Device, dev.pciBusID)
	assertPCIBusID(t, "metadata in the container", []byte(between(out, "metadata-begin", "metadata-end")), res.Device, dev.pciBusID)

	// While the VM holds the GPU, its ordinary device is not allocatable
	// (both consume the GPU's passthrough counter).
	createClaim(t, ns, "held", gpuClass, dev.uuid)
	createPod(t, ns, "held", node, "held", "sleep 1d")
	waitUnschedulable(t, ns, "held")
	deletePod(t, ns, "held")
	deleteClaim(t, ns, "held")

	deletePod(t, ns, "vm")
	deleteClaim(t, ns, "vm-gpu")
	waitSysfs(t, node, dev.pciBusID, vfio.DriverNVIDIA, "(null)")
	if c, err := sys.CDev(dev.pciBusID); err != nil || c != "" {
		t.Errorf("GPU %s back on nvidia: sysfs still names cdev %q (%v), want none", dev.pciBusID, c, err)
	}

	createClaim(t, ns, "after", gpuClass, dev.uuid)
	createPod(t, ns, "after", node, "after", "gpudra-gpus -v; echo end-of-report")
	waitRunning(t, ns, "after")
	assertSeesAllocation(t, ns, "after", "ctr")
	deletePod(t, ns, "after")
	deleteClaim(t, ns, "after")
}

// waitDeviceClass waits until the DeviceClass exists (the controller makes it).
func waitDeviceClass(t *testing.T, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := client.ResourceV1().DeviceClasses().Get(ctx, name, metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("DeviceClass %s: the controller did not make it: %v", name, err)
	}
}

// vfioDevice is what the test needs of a vfio device of the ResourceSlices.
type vfioDevice struct {
	uuid, pciBusID string
	index          int
}

// checkIOMMUFDAttributes checks what NVIDIA's vfio devices also carry:
// iommuFDEnabled (the node has /dev/iommu) and the GPU's PCI vendor ID.
func checkIOMMUFDAttributes(t *testing.T, name string, d resourceapi.Device) {
	t.Helper()
	if b := d.Attributes[slice.AttrIOMMUFDEnabled].BoolValue; b == nil || !*b {
		t.Errorf("vfio device %s: iommuFDEnabled %v, want true on a node with /dev/iommu", name, b)
	}
	if v := d.Attributes[slice.AttrVendorID].StringValue; v == nil || *v != "0x10de" {
		t.Errorf("vfio device %s: vendorID %v, want 0x10de", name, v)
	}
}

// waitVFIODevices waits for n vfio devices of node in the ResourceSlices.
func waitVFIODevices(t *testing.T, node string, n int) map[string]vfioDevice {
	t.Helper()
	var out map[string]vfioDevice
	var checked map[string]resourceapi.Device
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			return false, nil
		}
		out, checked = map[string]vfioDevice{}, map[string]resourceapi.Device{}
		for _, rs := range list.Items {
			for _, d := range rs.Spec.Devices {
				if typ := d.Attributes[slice.AttrType].StringValue; typ == nil || *typ != slice.DeviceTypeVFIO {
					continue
				}
				v := vfioDevice{}
				if s := d.Attributes[slice.AttrUUID].StringValue; s != nil {
					v.uuid = *s
				}
				if s := d.Attributes[vfio.PCIBusIDAttribute].StringValue; s != nil {
					v.pciBusID = *s
				}
				if i := d.Attributes[slice.AttrIndex].IntValue; i != nil {
					v.index = int(*i)
				}
				out[d.Name] = v
				checked[d.Name] = d
			}
		}
		return len(out) == n, nil
	})
	if err != nil {
		t.Fatalf("node %s: want %d vfio devices in its ResourceSlices, got %v", node, n, out)
	}
	for name, d := range checked {
		checkIOMMUFDAttributes(t, name, d)
	}
	return out
}

// ensureVFIOClass creates the controller's vfio DeviceClass unless it exists.
func ensureVFIOClass(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	n := compat.MustResolve(compat.Flags{Passthrough: true})
	if _, err := client.ResourceV1().DeviceClasses().Get(ctx, n.VFIOClass, metav1.GetOptions{}); err == nil {
		return
	}
	for _, c := range deviceclass.BaseClassesFor(n, "") {
		if c.Name != n.VFIOClass {
			continue
		}
		if _, err := client.ResourceV1().DeviceClasses().Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create DeviceClass %s: %v", c.Name, err)
		}
		t.Cleanup(func() {
			_ = client.ResourceV1().DeviceClasses().Delete(context.Background(), c.Name, metav1.DeleteOptions{})
		})
		return
	}
	t.Fatalf("deviceclass.BaseClassesFor has no %s", n.VFIOClass)
}

// createClaim creates a claim of one device (request "vm" for the vfio
// class, "gpu" otherwise) of class, of the GPU with uuid when set.
func createClaim(t *testing.T, ns, name, class, uuid string) {
	t.Helper()
	req := resourceapi.DeviceRequest{Name: requestName(class), Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}}
	if uuid != "" {
		req.Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf("device.attributes[%q].%s == %q", driver, slice.AttrUUID, uuid)}}}
	}
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{req}}}}
	if _, err := client.ResourceV1().ResourceClaims(ns).Create(context.Background(), c, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create claim %s/%s: %v", ns, name, err)
	}
}

func requestName(class string) string {
	if class == compat.NativeVFIOClass || class == compat.NVIDIAVFIOClass {
		return "vm"
	}
	return "gpu"
}

// createPod runs script (bash) in the workload image on node with the
// claim, then sleeps until it is stopped.
func createPod(t *testing.T, ns, name, node, claim, script string) {
	t.Helper()
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PodSpec{
		NodeSelector:                  map[string]string{"kubernetes.io/hostname": node},
		TerminationGracePeriodSeconds: ptr.To[int64](1),
		Containers: []v1.Container{{Name: "ctr", Image: "registry.local/gpudra/workload:local",
			Command:   []string{"bash", "-c", script + "; trap 'exit 0' TERM; sleep 2147483647 & wait"},
			Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "dev"}}}}},
		ResourceClaims: []v1.PodResourceClaim{{Name: "dev", ResourceClaimName: &claim}},
	}}
	if _, err := client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s/%s: %v", ns, name, err)
	}
}

// vfioScript lists the VFIO device nodes (both backends') and prints the claim's device metadata file,
// at the path KEP-5304 gives it in the container.
func vfioScript(claim, request string) string {
	meta := drametadata.ResourceClaimFilePath(driver, claim, request)
	return fmt.Sprintf(`for f in /dev/vfio/* /dev/vfio/devices/* /dev/iommu; do [ -c "$f" ] && echo "vfio-node $f"; done; echo metadata-begin; `+
		`if [ -r %[1]q ]; then echo "$(< %[1]q)"; else echo "no %[1]s"; fi; echo metadata-end; echo end-of-report`, meta)
}
