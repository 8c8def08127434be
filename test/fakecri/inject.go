package fakecri

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// unknownProduct is shown for a GPU whose product name nobody knows.
const unknownProduct = "NVIDIA GPU"

// gpuNodeRE matches the device node of a whole GPU, /dev/nvidia<minor>
// (not nvidiactl, nvidia-uvm, ...).
var gpuNodeRE = regexp.MustCompile(`^/dev/nvidia([0-9]+)$`)

// DeviceNode is a device node the container would see.
type DeviceNode struct {
	Path  string `json:"path"`
	Type  string `json:"type"`
	Major int64  `json:"major"`
	Minor int64  `json:"minor"`
}

// Mount is a mount the container would get from CDI.
type Mount struct {
	Destination string   `json:"destination"`
	Source      string   `json:"source,omitempty"`
	Type        string   `json:"type,omitempty"`
	Options     []string `json:"options,omitempty"`
}

// GPU is a GPU visible in the container, as `nvidia-smi -L` would list it.
type GPU struct {
	// Index is the position inside the container (0..n-1, by minor).
	Index int `json:"index"`
	// Minor of /dev/nvidia<Minor>.
	Minor int `json:"minor"`
	// UUID from GPUDRA_GPU_<Minor>; empty when that variable is unset.
	UUID string `json:"uuid"`
	// ProductName, or "NVIDIA GPU" when unknown.
	ProductName string `json:"productName"`
}

// Injection is what a created container would see once its CDI devices are
// injected. It is also the JSON line written to the state file.
type Injection struct {
	ContainerID string `json:"id"`
	SandboxID   string `json:"sandboxId"`
	// Pod is "<namespace>/<name>".
	Pod       string `json:"pod"`
	PodUID    string `json:"podUID"`
	Container string `json:"container"`
	Attempt   uint32 `json:"attempt"`
	// CDIDevices are the requested, fully qualified CDI device names.
	CDIDevices []string `json:"cdiDevices"`
	// DeviceNodes in the order the OCI spec lists them.
	DeviceNodes []DeviceNode `json:"deviceNodes"`
	// Env is the process environment (KEY=VALUE) after injection.
	Env    []string `json:"env"`
	Mounts []Mount  `json:"mounts,omitempty"`
	GPUs   []GPU    `json:"gpus"`
	// LogPath is the absolute path of the container's CRI log file.
	LogPath string    `json:"logPath,omitempty"`
	Created time.Time `json:"created"`
}

// Getenv returns the value of an environment variable of the container.
func (i Injection) Getenv(key string) (string, bool) {
	value, found := "", false
	for _, kv := range i.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			value, found = v, true
		}
	}
	return value, found
}

// HasDeviceNode reports whether the container sees a device node at path.
func (i Injection) HasDeviceNode(path string) bool {
	return slices.ContainsFunc(i.DeviceNodes, func(d DeviceNode) bool { return d.Path == path })
}

func (i Injection) devicePaths() []string {
	paths := make([]string, 0, len(i.DeviceNodes))
	for _, d := range i.DeviceNodes {
		paths = append(paths, d.Path)
	}
	return paths
}

func (i *Injection) clone() Injection {
	c := *i
	c.CDIDevices = slices.Clone(i.CDIDevices)
	c.DeviceNodes = slices.Clone(i.DeviceNodes)
	c.Env = slices.Clone(i.Env)
	c.GPUs = slices.Clone(i.GPUs)
	c.Mounts = make([]Mount, len(i.Mounts))
	for n, m := range i.Mounts {
		m.Options = slices.Clone(m.Options)
		c.Mounts[n] = m
	}
	return c
}

// inject builds the OCI spec of the container and injects its CDI devices
// into it, rescanning the spec directories first because the DRA plugin
// writes claim specs just before the kubelet creates containers. An
// unresolvable device fails the request like it does on a containerd node.
func (r *Runtime) inject(ctx context.Context, req *runtimeapi.CreateContainerRequest) (*Injection, error) {
	logger := klog.FromContext(ctx)
	cfg := req.GetConfig()
	names, err := requestedCDIDevices(cfg)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	spec := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	for _, kv := range cfg.GetEnvs() {
		spec.Process.Env = append(spec.Process.Env, kv.GetKey()+"="+string(kv.GetValue()))
	}
	if len(names) > 0 {
		r.cdiMu.Lock()
		refreshErr := r.cdiCache.Refresh()
		_, injectErr := r.cdiCache.InjectDevices(spec, names...)
		if injectErr == nil {
			injectErr = r.checkHostPaths(names)
		}
		r.cdiMu.Unlock()
		if refreshErr != nil {
			logger.V(2).Info("Some CDI specs could not be loaded", "err", refreshErr)
		}
		if injectErr != nil {
			err := fmt.Errorf("CDI device injection failed: %w", injectErr)
			if refreshErr != nil {
				err = fmt.Errorf("%w (CDI spec errors: %w)", err, refreshErr)
			}
			return nil, status.Error(codes.Unknown, err.Error())
		}
	}

	podMeta := req.GetSandboxConfig().GetMetadata()
	inj := &Injection{
		SandboxID:  req.PodSandboxId,
		Pod:        podMeta.GetNamespace() + "/" + podMeta.GetName(),
		PodUID:     podMeta.GetUid(),
		Container:  cfg.GetMetadata().GetName(),
		Attempt:    cfg.GetMetadata().GetAttempt(),
		CDIDevices: names,
		Env:        slices.Clone(spec.Process.Env),
		Created:    time.Now(),
	}
	for _, d := range spec.Linux.Devices {
		inj.DeviceNodes = append(inj.DeviceNodes, DeviceNode{Path: d.Path, Type: d.Type, Major: d.Major, Minor: d.Minor})
	}
	for _, m := range spec.Mounts {
		inj.Mounts = append(inj.Mounts, Mount{Destination: m.Destination, Source: m.Source, Type: m.Type, Options: slices.Clone(m.Options)})
	}
	inj.GPUs = r.visibleGPUs(inj)
	return inj, nil
}

// requestedCDIDevices lists the CDI devices of a container: the CDIDevices
// field (what the kubelet fills for DRA) followed by any devices named in
// cdi.k8s.io/ annotations, without duplicates.
func requestedCDIDevices(cfg *runtimeapi.ContainerConfig) ([]string, error) {
	var names []string
	seen := map[string]bool{}
	add := func(name string) {
		if name != "" && !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	for _, d := range cfg.GetCDIDevices() {
		add(d.GetName())
	}
	_, annotated, err := cdi.ParseAnnotations(cfg.GetAnnotations())
	if err != nil {
		return nil, fmt.Errorf("parse CDI device annotations: %w", err)
	}
	for _, name := range annotated {
		add(name)
	}
	return names, nil
}

// visibleGPUs lists the injected /dev/nvidia<N> nodes by minor, numbered as
// nvidia-smi numbers the GPUs a container can see.
func (r *Runtime) visibleGPUs(inj *Injection) []GPU {
	var gpus []GPU
	for _, d := range inj.DeviceNodes {
		m := gpuNodeRE.FindStringSubmatch(d.Path)
		if m == nil {
			continue
		}
		minor, err := strconv.Atoi(m[1])
		if err != nil {
			continue
		}
		gpus = append(gpus, GPU{Minor: minor})
	}
	sort.Slice(gpus, func(a, b int) bool { return gpus[a].Minor < gpus[b].Minor })
	for n := range gpus {
		g := &gpus[n]
		g.Index = n
		g.UUID, _ = inj.Getenv("GPUDRA_GPU_" + strconv.Itoa(g.Minor))
		g.ProductName = r.lookupProduct(inj, g.Minor, g.UUID)
	}
	return gpus
}

func (r *Runtime) lookupProduct(inj *Injection, minor int, uuid string) string {
	if name, ok := inj.Getenv("GPUDRA_GPU_" + strconv.Itoa(minor) + "_PRODUCT"); ok && name != "" {
		return name
	}
	if r.productName != nil && uuid != "" {
		if name := r.productName(uuid); name != "" {
			return name
		}
	}
	return unknownProduct
}
