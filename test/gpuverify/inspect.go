package gpuverify

import (
	"context"
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/internal/plugin/discovery"
	"github.com/gpudra/gpudra/internal/plugin/mig"
	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/internal/plugin/slice"
)

// Inspection is what `gpu-kubelet-plugin inspect` prints (same JSON shape
// as internal/plugin.Inspection). The kit builds it from the same parts as
// plugin.Inspect (discovery, --mig=static, internal/plugin/slice) rather than calling
// it: Inspect opens NVML itself, which would keep the kit from running on an
// injected (simulated) library, and internal/plugin would roughly double the
// binary's size with the kubelet plugin's wiring.
type Inspection struct {
	Node           *model.Node                 `json:"node"`
	ResourceSlices []resourceapi.ResourceSlice `json:"resourceSlices"`
}

// sliceOptions are the plugin's defaults: health monitoring is on, so
// slices are cut at the API's limit for devices with taints (64).
var sliceOptions = slice.Options{MaxDevicesPerSlice: resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures}

// inspect is step 1. It returns the discovered node (MIG applied as
// --mig=static), or nil when NVML or discovery failed.
func (k *kit) inspect(ctx context.Context) *model.Node {
	s := k.r.section("1. NVML, discovery and the ResourceSlice (what `gpu-kubelet-plugin inspect` shows)")
	lib, err := k.cfg.Open()
	if !s.check(err, "open and initialize NVML") {
		return nil
	}
	k.lib = lib
	if r := k.cfg.Roots; r != nil {
		s.info("driver root %s, device nodes under %s, sysfs %s (the plugin's rule: dev/ and sys/ of the driver root when it has them)",
			r.Driver, r.Dev, r.Sys)
	}
	node, err := discovery.Discover(ctx, lib, discovery.Options{SysfsRoot: k.cfg.SysfsRoot})
	if !s.check(err, "discover GPUs (internal/plugin/discovery)") {
		return nil
	}
	s.info("driver %s, CUDA %s, %d GPU(s)", node.DriverVersion, node.CUDADriverVersion, len(node.GPUs))
	if len(node.GPUs) == 0 {
		s.fail("no GPU found: NVML reports none (is this the machine with the GPUs, and the driver loaded?)")
		return nil
	}
	// The plugin's default: GPUs in MIG mode publish their existing MIG
	// devices and their MIG configuration is never changed.
	mig.Apply(node, mig.ModeStatic)
	for i := range node.GPUs {
		describeGPU(s, &node.GPUs[i])
	}
	res, err := slice.Resources(k.cfg.NodeName, node, sliceOptions)
	if !s.check(err, "build the node's ResourceSlices (internal/plugin/slice)") {
		k.r.Inspection = &Inspection{Node: node}
		return node
	}
	objs := slice.Objects(k.cfg.DriverName, k.cfg.NodeName, res)
	k.r.Inspection = &Inspection{Node: node, ResourceSlices: objs}
	var names []string
	for _, o := range objs {
		for _, d := range o.Spec.Devices {
			names = append(names, d.Name)
		}
	}
	s.info("%d ResourceSlice(s), %d device(s): %s", len(objs), len(names), strings.Join(names, ", "))
	if k.cfg.ShowSlices {
		if out, err := yaml.Marshal(objs); err == nil {
			s.info("%s", strings.TrimSpace(string(out)))
		}
	}
	if problems := checkSlices(k.cfg.DriverName, objs); len(problems) > 0 {
		s.fail("ResourceSlices break API limits:\n%s", strings.Join(problems, "\n"))
	} else {
		s.pass("ResourceSlices within the API limits (devices per slice, attributes, names, value lengths, counters)")
	}
	return node
}

func describeGPU(s *Section, g *model.GPU) {
	numa := "?"
	if g.NUMANode != nil {
		numa = fmt.Sprint(*g.NUMANode)
	}
	s.info("%s: index %d, %s (%s, %s, compute %s), %s, %s, PCI %s, PCIe root %s, NUMA %s",
		g.DeviceName(), g.Index, g.ProductName, g.Brand, g.Architecture, g.CUDAComputeCapability,
		gib(g.MemoryBytes), g.UUID, g.PCIBusID, orUnknown(g.PCIeRoot), numa)
	switch {
	case !g.MIGCapable:
		s.info("  %s: not MIG-capable; published whole", g.DeviceName())
	case g.Partitioning == model.StaticMIG:
		s.info("  %s: MIG mode enabled; %d existing MIG device(s) published (static), the GPU itself is not and is not prepared",
			g.DeviceName(), len(g.MIGDevices))
		for j := range g.MIGDevices {
			d := &g.MIGDevices[j]
			s.info("    %s: %s, GI %d CI %d, memory slices %d+%d, %s, %s",
				model.MIGDeviceName(g, d.Profile, d.ProfileID, d.Start), d.Profile, d.GIID, d.CIID, d.Start, d.Size, gib(d.MemoryBytes), d.UUID)
		}
	default:
		s.info("  %s: MIG-capable, MIG mode disabled; published whole", g.DeviceName())
	}
	if g.NVLinkDomain != "" {
		s.info("  %s: NVLink domain %s", g.DeviceName(), g.NVLinkDomain)
	}
}

func gib(b uint64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
