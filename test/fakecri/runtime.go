// Package fakecri is a container runtime for end-to-end tests: it answers the
// kubelet's CRI calls from memory (k8s.io/cri-client/pkg/fake) but resolves
// the CDI devices of every created container the way containerd does, records
// what the container would see (device nodes, environment, mounts) and writes
// a CRI-format log file describing it, so that `kubectl logs` of a pod shows
// which GPUs it got.
package fakecri

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
	"k8s.io/klog/v2"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// DefaultCDISpecDirs are the directories containerd reads CDI specs from.
var DefaultCDISpecDirs = []string{"/etc/cdi", "/var/run/cdi"}

// fakeImageSize is the size reported for every pulled image; the CRI client
// rejects images of size zero.
const fakeImageSize = 1 << 20

// Options configure a Runtime.
type Options struct {
	// CDISpecDirs are scanned, in increasing priority, for CDI specs on
	// every CreateContainer. Empty means DefaultCDISpecDirs.
	CDISpecDirs []string
	// ProductName returns the product name of a GPU UUID, or "" when
	// unknown. Optional; see FileProductLookup.
	ProductName func(uuid string) string
	// StateFile, when set, gets one JSON line (an Injection) appended per
	// created container.
	StateFile string
	// ProcessDir, when set, is a simulated driver root's process
	// directory: running containers with GPUs are recorded there as GPU
	// processes (processes.go).
	ProcessDir string
}

// Runtime is the fake CRI runtime and image service.
type Runtime struct {
	*fake.RemoteRuntime

	specDirs    []string
	productName func(uuid string) string
	state       *stateWriter
	processDir  string

	// cdiMu serialises refresh+inject so every request sees a full rescan.
	cdiMu    sync.Mutex
	cdiCache *cdi.Cache

	mu         sync.Mutex
	injections map[string]*Injection // by container ID
	logDirs    map[string]string     // sandbox ID -> PodSandboxConfig.LogDirectory

	server   *grpc.Server
	listener net.Listener
	socket   string
	served   chan struct{}
}

// New creates a Runtime; it serves nothing until Start.
func New(opts Options) (*Runtime, error) {
	dirs := opts.CDISpecDirs
	if len(dirs) == 0 {
		dirs = DefaultCDISpecDirs
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dirs...), cdi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("create CDI cache over %v: %w", dirs, err)
	}
	r := &Runtime{
		RemoteRuntime: fake.NewFakeRemoteRuntime(),
		specDirs:      append([]string(nil), dirs...),
		productName:   opts.ProductName,
		processDir:    opts.ProcessDir,
		cdiCache:      cache,
		injections:    map[string]*Injection{},
		logDirs:       map[string]string{},
	}
	if opts.StateFile != "" {
		r.state = &stateWriter{path: opts.StateFile}
	}
	r.ImageService.SetFakeImageSize(fakeImageSize)
	r.RuntimeService.Lock()
	r.RuntimeService.FakeStatus = &runtimeapi.RuntimeStatus{
		Conditions: []*runtimeapi.RuntimeCondition{
			{Type: runtimeapi.RuntimeReady, Status: true},
			{Type: runtimeapi.NetworkReady, Status: true},
		},
	}
	r.RuntimeService.Unlock()
	return r, nil
}

// CDISpecDirs returns the directories the runtime resolves CDI devices from.
func (r *Runtime) CDISpecDirs() []string { return append([]string(nil), r.specDirs...) }

// Start listens on the unix socket path (replacing a stale socket there) and
// serves the CRI runtime and image services in the background until Stop.
// The logger of ctx is handed to every request.
func (r *Runtime) Start(ctx context.Context, socket string) error {
	logger := klog.FromContext(ctx).WithName("fakecri")
	if r.server != nil {
		return errors.New("fake CRI runtime already started")
	}
	if err := os.MkdirAll(filepath.Dir(socket), 0o755); err != nil {
		return fmt.Errorf("create directory of socket %s: %w", socket, err)
	}
	if err := removeStaleSocket(socket); err != nil {
		return err
	}
	lis, err := net.Listen("unix", socket)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", socket, err)
	}
	r.server = grpc.NewServer(grpc.UnaryInterceptor(loggingInterceptor(logger)))
	runtimeapi.RegisterRuntimeServiceServer(r.server, r)
	runtimeapi.RegisterImageServiceServer(r.server, r)
	r.listener, r.socket, r.served = lis, socket, make(chan struct{})
	r.clearProcesses(ctx)
	go func() {
		defer close(r.served)
		if err := r.server.Serve(lis); err != nil {
			logger.Error(err, "CRI server stopped")
		}
	}()
	logger.Info("Serving fake CRI runtime", "socket", socket, "cdiSpecDirs", r.specDirs)
	return nil
}

// Stop stops serving (aborting requests in flight) and removes the socket.
// It is safe to call more than once.
func (r *Runtime) Stop() {
	if r.server == nil {
		return
	}
	r.server.Stop()
	<-r.served
	if err := os.Remove(r.socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
		klog.Background().Error(err, "Removing CRI socket", "socket", r.socket)
	}
}

// Injected returns what the container with this ID sees, as recorded when it
// was created; false if no such container exists (or it was removed).
func (r *Runtime) Injected(containerID string) (Injection, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	inj, ok := r.injections[containerID]
	if !ok {
		return Injection{}, false
	}
	return inj.clone(), true
}

// RunPodSandbox remembers the sandbox's log directory, then creates it in the fake.
func (r *Runtime) RunPodSandbox(ctx context.Context, req *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	resp, err := r.RemoteRuntime.RunPodSandbox(ctx, req)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.logDirs[resp.PodSandboxId] = req.GetConfig().GetLogDirectory()
	r.mu.Unlock()
	klog.FromContext(ctx).V(2).Info("Pod sandbox running", "sandbox", resp.PodSandboxId,
		"pod", klog.KRef(req.GetConfig().GetMetadata().GetNamespace(), req.GetConfig().GetMetadata().GetName()))
	return resp, nil
}

// RemovePodSandbox forgets the sandbox.
func (r *Runtime) RemovePodSandbox(ctx context.Context, req *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	resp, err := r.RemoteRuntime.RemovePodSandbox(ctx, req)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	delete(r.logDirs, req.PodSandboxId)
	r.mu.Unlock()
	return resp, nil
}

// CreateContainer injects the container's CDI devices into an OCI spec, as
// containerd does, and fails when one cannot be resolved. On success the
// container exists in the fake, with its log path set.
func (r *Runtime) CreateContainer(ctx context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	cfg := req.GetConfig()
	podMeta := req.GetSandboxConfig().GetMetadata()
	logger := klog.FromContext(ctx).WithValues("pod", klog.KRef(podMeta.GetNamespace(), podMeta.GetName()),
		"container", cfg.GetMetadata().GetName(), "attempt", cfg.GetMetadata().GetAttempt())

	inj, err := r.inject(ctx, req)
	if err != nil {
		logger.Error(err, "Creating container failed")
		return nil, err
	}
	inj.LogPath = r.logPath(req)

	resp, err := r.RemoteRuntime.CreateContainer(ctx, req)
	if err != nil {
		return nil, err
	}
	inj.ContainerID = resp.ContainerId
	r.setLogPath(resp.ContainerId, inj.LogPath)

	r.mu.Lock()
	r.injections[resp.ContainerId] = inj
	r.mu.Unlock()
	logger.Info("Container created", "containerID", resp.ContainerId, "cdiDevices", inj.CDIDevices,
		"deviceNodes", inj.devicePaths(), "logPath", inj.LogPath)
	if r.state != nil {
		if err := r.state.append(inj); err != nil {
			logger.Error(err, "Recording container in the state file failed", "stateFile", r.state.path)
		}
	}
	return resp, nil
}

// StartContainer writes the container's log file, then marks it running.
func (r *Runtime) StartContainer(ctx context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	logger := klog.FromContext(ctx).WithValues("containerID", req.ContainerId)
	r.mu.Lock()
	inj, ok := r.injections[req.ContainerId]
	var rec Injection
	if ok {
		rec = inj.clone()
	}
	r.mu.Unlock()
	if ok && rec.LogPath != "" {
		if err := writeContainerLog(rec.LogPath, rec.LogLines()); err != nil {
			logger.Error(err, "Writing container log failed")
			return nil, err
		}
		logger.V(2).Info("Container log written", "logPath", rec.LogPath)
	}
	resp, err := r.RemoteRuntime.StartContainer(ctx, req)
	if err == nil && ok {
		r.startProcess(ctx, rec)
	}
	return resp, err
}

// RemoveContainer removes the container, its record and its simulated GPU
// process.
func (r *Runtime) RemoveContainer(ctx context.Context, req *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	resp, err := r.RemoteRuntime.RemoveContainer(ctx, req)
	if err != nil {
		return nil, err
	}
	r.stopProcess(ctx, req.ContainerId)
	r.mu.Lock()
	delete(r.injections, req.ContainerId)
	r.mu.Unlock()
	return resp, nil
}

// logPath is where the kubelet expects the container's log: the container's
// LogPath relative to the sandbox's LogDirectory. Empty when neither is set.
func (r *Runtime) logPath(req *runtimeapi.CreateContainerRequest) string {
	rel := req.GetConfig().GetLogPath()
	if rel == "" {
		return ""
	}
	dir := req.GetSandboxConfig().GetLogDirectory()
	if dir == "" {
		r.mu.Lock()
		dir = r.logDirs[req.PodSandboxId]
		r.mu.Unlock()
	}
	if dir == "" || filepath.IsAbs(rel) {
		return rel
	}
	return filepath.Join(dir, rel)
}

// setLogPath makes ContainerStatus report the log path, as real runtimes do.
func (r *Runtime) setLogPath(containerID, path string) {
	r.RuntimeService.Lock()
	defer r.RuntimeService.Unlock()
	if c, ok := r.RuntimeService.Containers[containerID]; ok {
		c.LogPath = path
	}
}

func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("inspect socket path %s: %w", path, err)
	}
	if fi.Mode()&fs.ModeSocket == 0 {
		return fmt.Errorf("socket path %s exists and is not a socket", path)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	return nil
}

// loggingInterceptor gives every unary request a logger named after its
// method and logs failures at V(4), successes at V(6).
func loggingInterceptor(base klog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		logger := base.WithValues("method", filepath.Base(info.FullMethod))
		resp, err := handler(klog.NewContext(ctx, logger), req)
		if err != nil {
			logger.V(4).Info("CRI call failed", "err", err)
		} else {
			logger.V(6).Info("CRI call")
		}
		return resp, err
	}
}
