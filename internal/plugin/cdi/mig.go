package cdi

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// MIGInstance identifies a MIG device of a claim: the parent GPU is the
// ClaimDevice's GPU.
type MIGInstance struct {
	UUID string
	GIID int
	CIID int
	// Profile, e.g. "1g.10gb"; empty when unknown.
	Profile string
}

// MIGCaps supplies the capability device nodes that give a container access
// to one MIG device (/dev/nvidia-caps/nvidia-cap<N> for its GPU instance
// and its compute instance). Together with the parent GPU's device node
// they are all a container needs to use the MIG device.
type MIGCaps interface {
	Nodes(gpuMinor, giID, ciID int) ([]*cdispec.DeviceNode, error)
}

// capsDir is where the NVIDIA driver creates the capability device nodes.
const capsDir = "/dev/nvidia-caps"

// SimulatedMIGCaps numbers capability nodes the way the driver's
// mig-minors table lays them out (config and monitor first, then per GPU
// its 15 GPU instances, each followed by its 8 compute instances), with a
// fixed major number.
type SimulatedMIGCaps struct{}

const (
	simulatedCapsMajor = 511
	maxGPUInstances    = 15
	maxComputeInst     = 8
)

// Nodes implements MIGCaps.
func (SimulatedMIGCaps) Nodes(gpuMinor, giID, ciID int) ([]*cdispec.DeviceNode, error) {
	base := 3 + gpuMinor*maxGPUInstances*(1+maxComputeInst) + giID*(1+maxComputeInst)
	return capNodes(simulatedCapsMajor, int64(base), int64(base+1+ciID)), nil
}

func capNodes(major, gi, ci int64) []*cdispec.DeviceNode {
	return []*cdispec.DeviceNode{
		charDevice(capsDir+"/nvidia-cap"+strconv.FormatInt(gi, 10), major, gi),
		charDevice(capsDir+"/nvidia-cap"+strconv.FormatInt(ci, 10), major, ci),
	}
}

// hostDevRoot sets the nodes' host paths under root (as the host sees the
// directory that holds dev/nvidia-caps), when that is not "/".
func hostDevRoot(nodes []*cdispec.DeviceNode, root string) []*cdispec.DeviceNode {
	if root == "" || root == "/" {
		return nodes
	}
	for _, n := range nodes {
		n.HostPath = filepath.Join(root, n.Path)
	}
	return nodes
}

// ProcMIGCaps reads the capability minors of a real node from the driver's
// /proc/driver/nvidia-caps/mig-minors table and the nvidia-caps major from
// /proc/devices, once.
type ProcMIGCaps struct {
	major  int64
	minors map[string]int64 // "gpu0/gi3/access" -> minor
	// hostDevRoot is the host's root of dev/nvidia-caps ("/" normally).
	hostDevRoot string
}

// NewProcMIGCaps reads the tables under procRoot (normally /proc). The
// capability nodes are named under hostDevRoot on the host ("/" normally; a
// containerized or simulated driver root brings its own dev/).
func NewProcMIGCaps(procRoot, hostDevRoot string) (*ProcMIGCaps, error) {
	c := &ProcMIGCaps{major: -1, minors: map[string]int64{}, hostDevRoot: hostDevRoot}
	if err := scanPairs(filepath.Join(procRoot, "devices"), func(a, b string) {
		if b == "nvidia-caps" {
			c.major, _ = strconv.ParseInt(a, 10, 64)
		}
	}); err != nil {
		return nil, err
	}
	if c.major < 0 {
		return nil, fmt.Errorf("no nvidia-caps entry in %s: is the NVIDIA driver loaded with MIG support?", filepath.Join(procRoot, "devices"))
	}
	if err := scanPairs(filepath.Join(procRoot, "driver/nvidia-caps/mig-minors"), func(a, b string) {
		if n, err := strconv.ParseInt(b, 10, 64); err == nil {
			c.minors[a] = n
		}
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// Nodes implements MIGCaps.
func (c *ProcMIGCaps) Nodes(gpuMinor, giID, ciID int) ([]*cdispec.DeviceNode, error) {
	giKey := fmt.Sprintf("gpu%d/gi%d/access", gpuMinor, giID)
	ciKey := fmt.Sprintf("gpu%d/gi%d/ci%d/access", gpuMinor, giID, ciID)
	gi, ok1 := c.minors[giKey]
	ci, ok2 := c.minors[ciKey]
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("the driver's mig-minors table has no %s or %s", giKey, ciKey)
	}
	return hostDevRoot(capNodes(c.major, gi, ci), c.hostDevRoot), nil
}

// scanPairs calls f with the first two fields of every line of a file.
func scanPairs(path string, f func(a, b string)) error {
	file, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	defer func() { _ = file.Close() }()
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) >= 2 {
			f(fields[0], fields[1])
		}
	}
	return sc.Err()
}

// SetMIGCaps enables MIG devices in the writer's specs.
func (w *Writer) SetMIGCaps(c MIGCaps) { w.migCaps = c }

// migEdits are the edits of a MIG device: its parent GPU's edits plus the
// capability nodes of its GPU and compute instance.
func (w *Writer) migEdits(d ClaimDevice, parent *cdispec.ContainerEdits) (cdispec.ContainerEdits, error) {
	if w.migCaps == nil {
		return cdispec.ContainerEdits{}, fmt.Errorf("MIG device %s: MIG is not enabled in this plugin's CDI writer", d.DeviceName)
	}
	nodes, err := w.migCaps.Nodes(d.GPU.Minor, d.MIG.GIID, d.MIG.CIID)
	if err != nil {
		return cdispec.ContainerEdits{}, fmt.Errorf("MIG device %s: %w", d.DeviceName, err)
	}
	e := *parent
	e.DeviceNodes = append(append([]*cdispec.DeviceNode{}, parent.DeviceNodes...), nodes...)
	return e, nil
}
