package fakecri

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2/ktesting"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

const (
	testKind  = "k8s.gpu.gpudra.io/claim"
	testImage = "registry.k8s.io/pause:3.10"
)

// testEnv is a started Runtime and a real CRI gRPC client talking to it.
type testEnv struct {
	rt      *Runtime
	ctx     context.Context
	cdiDir  string
	podLogs string
	socket  string
	client  runtimeapi.RuntimeServiceClient
	images  runtimeapi.ImageServiceClient
}

// startRuntime serves a Runtime over a fresh CDI directory; opts.CDISpecDirs
// is filled in when empty.
func startRuntime(t *testing.T, opts Options) *testEnv {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	root := t.TempDir()
	env := &testEnv{ctx: ctx, cdiDir: filepath.Join(root, "cdi"), podLogs: filepath.Join(root, "pods")}
	require.NoError(t, os.MkdirAll(env.cdiDir, 0o755))
	if len(opts.CDISpecDirs) == 0 {
		opts.CDISpecDirs = []string{env.cdiDir}
	}
	// Unix socket paths are limited to ~108 bytes; test temp dirs may be longer.
	sockDir, err := os.MkdirTemp("", "fcri")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	env.socket = filepath.Join(sockDir, "cri.sock")

	env.rt, err = New(opts)
	require.NoError(t, err)
	require.NoError(t, env.rt.Start(ctx, env.socket))
	t.Cleanup(env.rt.Stop)

	conn, err := grpc.NewClient("unix://"+env.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	env.client = runtimeapi.NewRuntimeServiceClient(conn)
	env.images = runtimeapi.NewImageServiceClient(conn)
	return env
}

// gpuDevice is a claim device as the DRA plugin writes it, fully specified
// so that no host device needs to exist.
func gpuDevice(claimUID string, minor int, uuid string, extraEnv ...string) cdispec.Device {
	return cdispec.Device{
		Name: claimUID + "-gpu-" + strconv.Itoa(minor),
		ContainerEdits: cdispec.ContainerEdits{
			Env: append([]string{"NVIDIA_VISIBLE_DEVICES=" + uuid, "GPUDRA_GPU_" + strconv.Itoa(minor) + "=" + uuid}, extraEnv...),
			DeviceNodes: []*cdispec.DeviceNode{{
				Path: "/dev/nvidia" + strconv.Itoa(minor), Type: "c", Major: 195, Minor: int64(minor),
			}},
		},
	}
}

// withVisible makes the device show several GPUs in NVIDIA_VISIBLE_DEVICES,
// as every device of a multi-GPU claim does.
func withVisible(dev cdispec.Device, visible string) cdispec.Device {
	dev.ContainerEdits.Env[0] = "NVIDIA_VISIBLE_DEVICES=" + visible
	return dev
}

// writeSpec writes the claim's CDI spec (with spec-level /dev/nvidiactl and
// a driver library mount whose host file exists) into dir.
func writeSpec(t *testing.T, dir, claimUID string, devices ...cdispec.Device) {
	t.Helper()
	lib := filepath.Join(filepath.Dir(dir), "libcuda.so.1")
	require.NoError(t, os.WriteFile(lib, nil, 0o644))
	writeSpecWithEdits(t, dir, claimUID, cdispec.ContainerEdits{
		DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/nvidiactl", Type: "c", Major: 195, Minor: 255}},
		Mounts:      []*cdispec.Mount{{HostPath: lib, ContainerPath: "/usr/lib/libcuda.so.1", Options: []string{"ro", "bind"}}},
	}, devices...)
}

// writeSpecWithEdits writes the claim's CDI spec with the given spec-level edits.
func writeSpecWithEdits(t *testing.T, dir, claimUID string, edits cdispec.ContainerEdits, devices ...cdispec.Device) {
	t.Helper()
	spec := &cdispec.Spec{Kind: testKind, Devices: devices, ContainerEdits: edits}
	version, err := cdispec.MinimumRequiredVersion(spec)
	require.NoError(t, err)
	spec.Version = version
	data, err := json.Marshal(spec)
	require.NoError(t, err)
	path := filepath.Join(dir, "gpudra-claim-"+claimUID+".json")
	require.NoError(t, os.WriteFile(path+".tmp", data, 0o644))
	require.NoError(t, os.Rename(path+".tmp", path))
}

func deviceID(claimUID string, minor int) string {
	return testKind + "=" + claimUID + "-gpu-" + strconv.Itoa(minor)
}

// runPod runs a sandbox the way the kubelet does, with a log directory.
func (e *testEnv) runPod(t *testing.T, namespace, name string) (string, *runtimeapi.PodSandboxConfig) {
	t.Helper()
	uid := "uid-" + name
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: namespace, Uid: uid},
		LogDirectory: filepath.Join(e.podLogs, namespace+"_"+name+"_"+uid),
	}
	resp, err := e.client.RunPodSandbox(e.ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	require.NoError(t, err)
	return resp.PodSandboxId, cfg
}

// createContainer creates a container as the kubelet would, log path included.
func (e *testEnv) createContainer(sandboxID string, sandbox *runtimeapi.PodSandboxConfig, name string,
	annotations map[string]string, cdiIDs ...string) (*runtimeapi.CreateContainerResponse, error) {
	devices := make([]*runtimeapi.CDIDevice, 0, len(cdiIDs))
	for _, id := range cdiIDs {
		devices = append(devices, &runtimeapi.CDIDevice{Name: id})
	}
	return e.client.CreateContainer(e.ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: sandboxID,
		Config: &runtimeapi.ContainerConfig{
			Metadata:    &runtimeapi.ContainerMetadata{Name: name},
			Image:       &runtimeapi.ImageSpec{Image: testImage},
			Envs:        []*runtimeapi.KeyValue{{Key: "FROM_POD", Value: []byte("yes")}},
			Annotations: annotations,
			CDIDevices:  devices,
			LogPath:     filepath.Join(name, "0.log"),
		},
		SandboxConfig: sandbox,
	})
}

// startAndWaitRunning starts the container and returns its status.
func (e *testEnv) startAndWaitRunning(t *testing.T, containerID string) *runtimeapi.ContainerStatus {
	t.Helper()
	_, err := e.client.StartContainer(e.ctx, &runtimeapi.StartContainerRequest{ContainerId: containerID})
	require.NoError(t, err)
	resp, err := e.client.ContainerStatus(e.ctx, &runtimeapi.ContainerStatusRequest{ContainerId: containerID})
	require.NoError(t, err)
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, resp.Status.State)
	return resp.Status
}

// readLog returns the text of every record of a CRI log file, checking the
// framing of each.
func readLog(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rec, err := ParseLogLine(sc.Text())
		require.NoError(t, err)
		require.Equal(t, "stdout", rec.Stream)
		require.False(t, rec.Partial)
		require.WithinDuration(t, time.Now(), rec.Time, time.Minute)
		lines = append(lines, rec.Text)
	}
	require.NoError(t, sc.Err())
	return lines
}
