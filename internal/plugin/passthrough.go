package plugin

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime/schema"
	metadatav1beta1 "k8s.io/dynamic-resource-allocation/api/metadata/v1beta1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/internal/plugin/prepare"
	"github.com/gpudra/gpudra/internal/plugin/vfio"
)

// addPassthroughFlag registers --passthrough (chart kubeletPlugin.passthrough).
func (o *Options) addPassthroughFlag(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Passthrough, "passthrough", false,
		"GPU passthrough to virtual machines (KubeVirt): also publish each GPU without MIG as a vfio device (class vfio.gpu.gpudra.io, "+
			"vfio.gpu.nvidia.com in NVIDIA compatibility mode), exclusive with the GPU's own device through a shared counter; prepare binds it "+
			"to vfio-pci and gives the container /dev/vfio/<IOMMU group> (with a VfioDeviceConfig preferring iommufd, on a node with /dev/iommu, "+
			"/dev/vfio/devices/vfio<N>), with device metadata (the PCI address) for KubeVirt. Needs the IOMMU "+
			"and the vfio-pci module on the node, and the DRAPartitionableDevices and DRADeviceMetadata feature gates in the cluster.")
}

// validatePassthrough refuses what passthrough cannot be combined with; the
// sharing flags are parsed by then.
func (o *Options) validatePassthrough() error {
	if o.Passthrough && o.shares.Enabled() {
		return fmt.Errorf("--passthrough cannot be combined with --consumable-shares=%s: a shared GPU cannot also be passed through whole, "+
			"and its device would consume the passthrough counter with every share", o.shares)
	}
	return nil
}

// passthrough is what the prepare manager needs to rebind GPUs: the
// driver root's sysfs and /dev (nvmllib.Roots, as the NUMA attributes
// read sysfs), whether the node offers iommufd (model.Node.IOMMUFD, see
// detectIOMMUFD), and NVML to tell whether a GPU is in use. nil when off.
func (o *Options) passthrough(lib nvml.Interface, iommufd bool) *prepare.Passthrough {
	if !o.Passthrough {
		return nil
	}
	roots := o.roots()
	return &prepare.Passthrough{
		Sysfs: vfio.HostSysfs{Root: roots.Sys}, Dev: roots.Dev, HostDev: roots.HostDev, IOMMUFD: iommufd, Metadata: true,
		InUse:     func(uuid string) (string, error) { return gpuUsers(lib, uuid) },
		InUseWait: prepare.DefaultInUseWait, InUsePoll: prepare.DefaultInUsePoll,
	}
}

// detectIOMMUFD records on the node whether it offers iommufd: /dev/iommu
// in the /dev that holds /dev/vfio (nvmllib.Roots.Dev: the driver root's
// when it brings one, else the host's), as NVIDIA's driver decides. Only
// with passthrough: vfio devices publish it (iommuFDEnabled), and a claim
// preferring iommufd gets it there.
func (o *Options) detectIOMMUFD(ctx context.Context, node *model.Node) error {
	if !o.Passthrough {
		return nil
	}
	dev := o.roots().Dev
	on, err := vfio.IOMMUFDEnabled(dev)
	if err != nil {
		return fmt.Errorf("passthrough: %w", err)
	}
	node.IOMMUFD = on
	klog.FromContext(ctx).Info("Passthrough IOMMU backends", "iommufd", on, "iommuDevice", filepath.Join(dev, vfio.IOMMUPath))
	return nil
}

// gpuUsers lists the compute and graphics processes NVML knows on a GPU.
// NVML sees only its own clients: a process that merely holds the GPU's
// device node open (a monitoring agent) is not listed; the kernel then
// refuses or delays the unbind.
func gpuUsers(lib nvml.Interface, uuid string) (string, error) {
	if lib == nil {
		return "", nil
	}
	dev, ret := lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return "", fmt.Errorf("NVML: GPU %s: %v", uuid, nvml.ErrorString(ret))
	}
	var pids []string
	for _, list := range []func() ([]nvml.ProcessInfo, nvml.Return){dev.GetComputeRunningProcesses, dev.GetGraphicsRunningProcesses} {
		procs, ret := list()
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_NOT_SUPPORTED:
			continue
		default:
			return "", fmt.Errorf("NVML: processes on GPU %s: %v", uuid, nvml.ErrorString(ret))
		}
		for _, p := range procs {
			pids = append(pids, fmt.Sprintf("pid %d", p.Pid))
		}
	}
	return strings.Join(pids, ", "), nil
}

// passedThrough tells the health monitor which GPUs a claim holds through
// their vfio device (a holder is recorded before the GPU leaves nvidia and
// dropped after it is back); nil when passthrough is off.
func (o *Options) passedThrough(node *model.Node, prepared *prepare.Prepared) func(uuid string) bool {
	if !o.Passthrough {
		return nil
	}
	vfioName := map[string]string{}
	for _, g := range node.GPUs {
		if g.PassthroughEligible() {
			vfioName[g.UUID] = g.VFIODeviceName()
		}
	}
	return func(uuid string) bool {
		name, ok := vfioName[uuid]
		if !ok {
			return false
		}
		holders, err := prepared.Holding(name)
		// Unknown: probe, as without passthrough.
		return err == nil && len(holders) > 0
	}
}

// metadataOptions turn on device metadata (KEP-5304) with passthrough:
// KubeVirt finds a vfio device's PCI address there. The kubeletplugin
// helper then writes a metadata file and CDI spec per request of every
// claim into the CDI directory.
func (o *Options) metadataOptions() []kubeletplugin.Option {
	if !o.Passthrough {
		return nil
	}
	return []kubeletplugin.Option{
		kubeletplugin.EnableDeviceMetadata(true, []schema.GroupVersion{metadatav1beta1.SchemeGroupVersion}),
		kubeletplugin.CDIDirectory(o.CDIRoot),
	}
}
