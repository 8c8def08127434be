package prepare

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/plugin/cdi"
	"github.com/gpudra/gpudra/internal/plugin/checkpoint"
	"github.com/gpudra/gpudra/internal/plugin/claimconfig"
	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/internal/plugin/slice"
	"github.com/gpudra/gpudra/internal/plugin/vfio"
)

// Passthrough is what the Manager needs to pass GPUs through to virtual
// machines (Config.Passthrough; nil when passthrough is off).
type Passthrough struct {
	// Sysfs rebinds GPUs: vfio.HostSysfs on a node, a simulated kernel in
	// tests.
	Sysfs vfio.Sysfs
	// Dev and HostDev are the roots of /dev/vfio as this process and as the
	// host see them (nvmllib.Roots.Dev and HostDev).
	Dev, HostDev string
	// IOMMUFD: the node offers iommufd (Dev has /dev/iommu,
	// vfio.IOMMUFDEnabled), so a claim preferring it (VfioDeviceConfig
	// backendPolicy PreferIommuFD) gets the iommufd backend.
	IOMMUFD bool
	// InUse names the processes that use a GPU (by UUID); "" when none
	// does. A GPU in use is not taken from the nvidia driver. Optional.
	InUse func(uuid string) (string, error)
	// InUseWait is how long prepare waits, asking InUse every
	// InUsePoll, for a GPU's processes to exit before it refuses the
	// claim; 0 refuses at once. A refused prepare is retried by the kubelet
	// only at its pod resync, 60-90 s later (kubernetes#139836), so
	// waiting here for a workload that is stopping passes the GPU sooner.
	InUseWait, InUsePoll time.Duration
	// Metadata returns device metadata (KEP-5304) for vfio devices.
	Metadata bool
}

// indexVFIO maps the names of the node's vfio devices to their GPUs.
func indexVFIO(node *model.Node) map[string]*model.GPU {
	out := map[string]*model.GPU{}
	for i := range node.GPUs {
		if g := &node.GPUs[i]; g.PassthroughEligible() {
			out[g.VFIODeviceName()] = g
		}
	}
	return out
}

// planVFIO is the VFIO record of a vfio device. The IOMMU group is read now:
// without one (IOMMU off) the claim fails before anything changes.
func (m *Manager) planVFIO(c claimconfig.DeviceConfig, gpu *model.GPU) (*checkpoint.VFIO, error) {
	if m.cfg.Passthrough == nil || m.cfg.Passthrough.Sysfs == nil {
		return nil, fmt.Errorf("device %s is a passthrough device, but passthrough is off on this node's plugin", c.Result.Device)
	}
	if c.Config != nil && c.Config.Sharing != nil && c.Config.Sharing.Strategy != v1alpha1.ExclusiveStrategy {
		return nil, fmt.Errorf("device %s is passed through to a virtual machine and cannot be shared: remove the sharing configuration", c.Result.Device)
	}
	group, err := m.cfg.Passthrough.Sysfs.IOMMUGroup(gpu.PCIBusID)
	if err != nil {
		return nil, fmt.Errorf("device %s: %w", c.Result.Device, err)
	}
	rec := &checkpoint.VFIO{Parent: gpu.DeviceName(), PCIBusID: gpu.PCIBusID, IOMMUGroup: group}
	if c.VFIO != nil {
		rec.APIDevice = c.VFIO.APIDevice
		rec.IOMMUFD = c.VFIO.PreferIOMMUFD && m.cfg.Passthrough.IOMMUFD
	}
	return rec, nil
}

// siblingConflict: a vfio device conflicts with whoever holds its GPU's
// device, and a GPU's device with whoever holds its vfio device.
func (m *Manager) siblingConflict(d device, uid string) (checkpoint.Holder, bool, error) {
	switch {
	case d.VFIO != nil:
		return m.conflict(d.VFIO.Parent, uid, d.access())
	case d.MIG == nil:
		if g := m.gpus[d.Name]; g != nil && m.vfios[g.VFIODeviceName()] != nil {
			return m.conflict(g.VFIODeviceName(), uid, d.access())
		}
	}
	return checkpoint.Holder{}, false, nil
}

// bindVFIO moves the claim's passed-through GPUs to vfio-pci. The caller
// holds the locks and has recorded the claim as PrepareStarted with each
// device's VFIO entry, so a crash half-way is undone by Recover.
func (m *Manager) bindVFIO(ctx context.Context, rec *checkpoint.ClaimRecord) error {
	for _, d := range rec.Devices {
		if d.VFIO == nil {
			continue
		}
		check := func() error {
			if g := m.gpuOf(d); g != nil && g.MIGEnabled {
				return errors.New("MIG mode is on")
			}
			return m.waitUnused(ctx, d)
		}
		if err := vfio.ToVFIO(ctx, m.cfg.Passthrough.Sysfs, d.VFIO.PCIBusID, check); err != nil {
			return fmt.Errorf("device %s: %w", d.Name, err)
		}
		klog.FromContext(ctx).V(3).Info("GPU bound to vfio-pci", "device", d.Name, "pciBusID", d.VFIO.PCIBusID, "iommuGroup", d.VFIO.IOMMUGroup,
			"iommufd", d.VFIO.IOMMUFD)
	}
	return nil
}

// unbindVFIO gives the claim's passed-through GPUs back to nvidia; a GPU
// already there is left alone, so it is safe at any point of a rollback.
func (m *Manager) unbindVFIO(ctx context.Context, rec *checkpoint.ClaimRecord) error {
	for _, d := range rec.Devices {
		if d.VFIO == nil {
			continue
		}
		if m.cfg.Passthrough == nil || m.cfg.Passthrough.Sysfs == nil {
			return fmt.Errorf("device %s of the claim is passed through, but passthrough is off on this plugin: "+
				"turn it on again to give GPU %s back to the nvidia driver", d.Name, d.VFIO.PCIBusID)
		}
		if err := vfio.ToNVIDIA(ctx, m.cfg.Passthrough.Sysfs, d.VFIO.PCIBusID); err != nil {
			return fmt.Errorf("device %s: %w", d.Name, err)
		}
		klog.FromContext(ctx).V(3).Info("GPU given back to nvidia", "device", d.Name, "pciBusID", d.VFIO.PCIBusID)
	}
	return nil
}

// DefaultInUseWait is Passthrough.InUseWait on a node: most of the
// kubelet's 45 s timeout of a NodePrepareResources call (k8s.io/kubernetes
// pkg/kubelet/cm/dra/plugin, defaultClientCallTimeout, v1.37), leaving the
// rest of the prepare time. NVIDIA's driver waits up to 60 s.
const DefaultInUseWait, DefaultInUsePoll = 30 * time.Second, 500 * time.Millisecond

// waitUnused returns nil once no process uses the device's GPU (InUse),
// waiting up to InUseWait for the processes to exit; an error naming them
// when they do not, or when InUse fails.
func (m *Manager) waitUnused(ctx context.Context, d checkpoint.Device) error {
	pt := m.cfg.Passthrough
	if pt.InUse == nil {
		return nil
	}
	var users string
	var inUseErr error
	poll := pt.InUsePoll
	if poll <= 0 {
		poll = DefaultInUsePoll
	}
	start, logged := time.Now(), false
	err := wait.PollUntilContextTimeout(ctx, poll, pt.InUseWait, true, func(context.Context) (bool, error) {
		users, inUseErr = pt.InUse(d.UUID)
		if inUseErr != nil {
			return false, inUseErr
		}
		if users != "" && pt.InUseWait > 0 && !logged {
			logged = true
			klog.FromContext(ctx).Info("Waiting for the processes using a GPU to exit before passing it through",
				"device", d.Name, "uuid", d.UUID, "users", users, "wait", pt.InUseWait)
		}
		return users == "", nil
	})
	switch {
	case inUseErr != nil:
		return fmt.Errorf("cannot tell whether it is in use: %w", inUseErr)
	case users != "":
		return fmt.Errorf("it is in use by %s (waited %s for them to exit; stop them, then the kubelet retries the claim)",
			users, time.Since(start).Round(100*time.Millisecond))
	case err != nil:
		return fmt.Errorf("waiting for its processes to exit: %w", err)
	}
	return nil
}

// vfioClaimDevice is the CDI device of a passed-through GPU, which is bound
// to vfio-pci by now: with the iommufd backend its cdev is read from sysfs.
func (m *Manager) vfioClaimDevice(d device) (cdi.ClaimDevice, error) {
	if m.cfg.Passthrough == nil || m.cfg.Passthrough.Sysfs == nil {
		return cdi.ClaimDevice{}, fmt.Errorf("device %s is passed through, but passthrough is off on this plugin", d.Name)
	}
	which, err := vfio.NodesFor(m.cfg.Passthrough.Sysfs, d.VFIO.PCIBusID, d.VFIO.IOMMUGroup, d.VFIO.IOMMUFD, d.VFIO.APIDevice)
	if err != nil {
		return cdi.ClaimDevice{}, fmt.Errorf("device %s: %w", d.Name, err)
	}
	nodes, err := vfio.DeviceNodes(m.cfg.Passthrough.Dev, m.cfg.Passthrough.HostDev, which)
	if err != nil {
		return cdi.ClaimDevice{}, fmt.Errorf("device %s: %w", d.Name, err)
	}
	return cdi.ClaimDevice{DeviceName: d.Name, VFIO: nodes}, nil
}

// kubeletDevices are the devices of a prepared claim for the kubelet, with
// the metadata of passed-through GPUs when asked for.
func (m *Manager) kubeletDevices(rec *checkpoint.ClaimRecord) []kubeletplugin.Device {
	out := kubeletDevices(rec)
	if m.cfg.Passthrough == nil || !m.cfg.Passthrough.Metadata {
		return out
	}
	for i, d := range rec.Devices {
		if d.VFIO == nil {
			continue
		}
		product := ""
		if g := m.gpuOf(d); g != nil {
			product = g.ProductName
		}
		out[i].Metadata = vfio.Metadata(d.VFIO.PCIBusID, d.VFIO.IOMMUGroup, slice.DeviceTypeVFIO, d.UUID, product)
	}
	return out
}
