package cdi

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/internal/plugin/model"
)

// EditsProvider supplies the container edits a GPU needs. It is asked once
// per GPU at start-up (see NewCachedEdits), never per claim: discovering
// driver libraries is slow, prepares must not be.
type EditsProvider interface {
	// Common returns the edits every container with any of our GPUs needs:
	// control device nodes, and on real nodes the driver's libraries and
	// binaries.
	Common() (*cdispec.ContainerEdits, error)
	// Device returns the edits specific to one GPU (its device node).
	Device(gpu *model.GPU) (*cdispec.ContainerEdits, error)
}

// Device-node numbers of the NVIDIA kernel driver.
const (
	nvidiaMajor    = 195
	nvidiaCtlMinor = 255
	// nvidia-uvm gets a dynamic major on real nodes; simulated nodes use this one.
	simulatedUVMMajor = 510
)

// SimulatedEdits describes the device nodes a real NVIDIA node has, with
// explicit type/major/minor so that the CDI library never needs to stat the
// (absent) host paths. It adds no driver libraries.
type SimulatedEdits struct{}

// Common implements EditsProvider.
func (SimulatedEdits) Common() (*cdispec.ContainerEdits, error) {
	return &cdispec.ContainerEdits{
		DeviceNodes: []*cdispec.DeviceNode{
			charDevice("/dev/nvidiactl", nvidiaMajor, nvidiaCtlMinor),
			charDevice("/dev/nvidia-uvm", simulatedUVMMajor, 0),
			charDevice("/dev/nvidia-uvm-tools", simulatedUVMMajor, 1),
		},
	}, nil
}

// Device implements EditsProvider.
func (SimulatedEdits) Device(gpu *model.GPU) (*cdispec.ContainerEdits, error) {
	return &cdispec.ContainerEdits{
		DeviceNodes: []*cdispec.DeviceNode{
			charDevice("/dev/nvidia"+strconv.Itoa(gpu.Minor), nvidiaMajor, int64(gpu.Minor)),
		},
	}, nil
}

func charDevice(path string, major, minor int64) *cdispec.DeviceNode {
	mode := os.FileMode(0o666)
	return &cdispec.DeviceNode{Path: path, Type: "c", Major: major, Minor: minor, FileMode: &mode}
}

// CachedEdits computes every GPU's edits once and serves them from memory.
type CachedEdits struct {
	common  *cdispec.ContainerEdits
	devices map[string]*cdispec.ContainerEdits // by GPU UUID
	// unreachable GPUs did not answer NVML at start, by UUID.
	unreachable map[string]bool
	// failed GPUs answered discovery, but their edits failed, by UUID.
	failed map[string]error
}

// NewCachedEdits asks the provider for the common edits and the edits of each
// GPU of the node. A GPU the plugin could not describe at discovery
// (Unreachable) gets none. A GPU whose edits fail (it fell off the bus
// between discovery and now) does not stop the plugin: it is listed in
// Failed, gets no edits, and a prepare on it fails with the reason.
func NewCachedEdits(p EditsProvider, gpus []model.GPU) (*CachedEdits, error) {
	common, err := p.Common()
	if err != nil {
		return nil, fmt.Errorf("compute CDI edits common to all GPUs: %w", err)
	}
	c := &CachedEdits{common: common, devices: make(map[string]*cdispec.ContainerEdits, len(gpus)),
		unreachable: map[string]bool{}}
	for i := range gpus {
		if gpus[i].Unreachable != "" {
			c.unreachable[gpus[i].UUID] = true
			continue
		}
		e, err := p.Device(&gpus[i])
		if err != nil {
			if c.failed == nil {
				c.failed = map[string]error{}
			}
			c.failed[gpus[i].UUID] = fmt.Errorf("compute CDI edits of GPU %s (%s): %w", gpus[i].DeviceName(), gpus[i].UUID, err)
			continue
		}
		c.devices[gpus[i].UUID] = e
	}
	return c, nil
}

// Common implements EditsProvider.
func (c *CachedEdits) Common() (*cdispec.ContainerEdits, error) { return c.common, nil }

// Device implements EditsProvider.
func (c *CachedEdits) Device(gpu *model.GPU) (*cdispec.ContainerEdits, error) {
	e, ok := c.devices[gpu.UUID]
	if !ok && c.unreachable[gpu.UUID] {
		return nil, fmt.Errorf("GPU %s (%s) did not answer NVML when the plugin started (it is published from its last known identity, "+
			"tainted gpu.gpudra.io/lost); it cannot be prepared until it is repaired and the plugin restarted", gpu.DeviceName(), gpu.UUID)
	}
	if err := c.failed[gpu.UUID]; !ok && err != nil {
		return nil, fmt.Errorf("%w; it cannot be prepared until it is repaired and the plugin restarted", err)
	}
	if !ok {
		return nil, fmt.Errorf("no CDI edits known for GPU %s (%s): it was not present when the plugin started", gpu.DeviceName(), gpu.UUID)
	}
	return e, nil
}

// Failed lists the GPUs (by UUID) whose edits could not be computed, with why.
func (c *CachedEdits) Failed() map[string]error { return c.failed }

// HostPath is a file on the host that a container runtime opens for a CDI
// edit: a device node, the source of a bind mount, or a hook's program.
type HostPath struct {
	Path string
	// Kind is "device node", "mount" or "hook".
	Kind string
	// Node is the device node, for Kind "device node".
	Node *cdispec.DeviceNode
}

// HostPaths lists the host paths that edits name: each device node's host
// path (its path when it names none), each mount's source that is a path
// (mounts of pseudo file systems have none), each hook's program.
func HostPaths(e *cdispec.ContainerEdits) []HostPath {
	var out []HostPath
	for _, d := range e.DeviceNodes {
		p := d.HostPath
		if p == "" {
			p = d.Path
		}
		out = append(out, HostPath{Path: p, Kind: "device node", Node: d})
	}
	for _, m := range e.Mounts {
		if strings.HasPrefix(m.HostPath, "/") {
			out = append(out, HostPath{Path: m.HostPath, Kind: "mount"})
		}
	}
	for _, h := range e.Hooks {
		out = append(out, HostPath{Path: h.Path, Kind: "hook"})
	}
	return out
}
