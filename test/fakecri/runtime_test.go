package fakecri

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

func TestCreateContainerInjectsCDIDevices(t *testing.T) {
	products := map[string]string{"GPU-def": "NVIDIA A100-SXM4-40GB"}
	tests := []struct {
		name        string
		devices     []cdispec.Device // spec of claim uid1
		cdiIDs      []string
		annotations map[string]string
		wantNodes   []DeviceNode
		wantEnv     map[string]string
		wantLog     []string
	}{{
		name:    "one GPU",
		devices: []cdispec.Device{gpuDevice("uid1", 3, "GPU-abc")},
		cdiIDs:  []string{deviceID("uid1", 3)},
		wantNodes: []DeviceNode{
			{Path: "/dev/nvidiactl", Type: "c", Major: 195, Minor: 255},
			{Path: "/dev/nvidia3", Type: "c", Major: 195, Minor: 3},
		},
		wantEnv: map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-abc", "GPUDRA_GPU_3": "GPU-abc", "FROM_POD": "yes"},
		wantLog: []string{
			"container=ctr pod=ns1/pod1",
			"cdi-devices: k8s.gpu.gpudra.io/claim=uid1-gpu-3",
			"NVIDIA_VISIBLE_DEVICES=GPU-abc",
			"GPU 0: NVIDIA GPU (UUID: GPU-abc)",
			"device-nodes: /dev/nvidia3,/dev/nvidiactl",
			"env GPUDRA_GPU_3=GPU-abc",
		},
	}, {
		name: "two GPUs, product names from env and lookup",
		devices: []cdispec.Device{
			withVisible(gpuDevice("uid1", 7, "GPU-h100", "GPUDRA_GPU_7_PRODUCT=NVIDIA H100 80GB HBM3",
				"GPUDRA_SHARING_STRATEGY=TimeSlicing"), "GPU-def,GPU-h100"),
			withVisible(gpuDevice("uid1", 2, "GPU-def"), "GPU-def,GPU-h100"),
		},
		cdiIDs: []string{deviceID("uid1", 7), deviceID("uid1", 2)},
		wantEnv: map[string]string{
			"NVIDIA_VISIBLE_DEVICES": "GPU-def,GPU-h100", "GPUDRA_GPU_7": "GPU-h100", "GPUDRA_GPU_2": "GPU-def",
			"GPUDRA_SHARING_STRATEGY": "TimeSlicing",
		},
		wantLog: []string{
			"container=ctr pod=ns1/pod1",
			"cdi-devices: k8s.gpu.gpudra.io/claim=uid1-gpu-7,k8s.gpu.gpudra.io/claim=uid1-gpu-2",
			"NVIDIA_VISIBLE_DEVICES=GPU-def,GPU-h100",
			"GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-def)",
			"GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-h100)",
			"device-nodes: /dev/nvidia2,/dev/nvidia7,/dev/nvidiactl",
			"env GPUDRA_GPU_2=GPU-def",
			"env GPUDRA_GPU_7=GPU-h100",
			"env GPUDRA_GPU_7_PRODUCT=NVIDIA H100 80GB HBM3",
			"env GPUDRA_SHARING_STRATEGY=TimeSlicing",
		},
	}, {
		name:        "device requested by annotation",
		devices:     []cdispec.Device{gpuDevice("uid1", 0, "GPU-def")},
		annotations: map[string]string{"cdi.k8s.io/test": deviceID("uid1", 0)},
		wantNodes: []DeviceNode{
			{Path: "/dev/nvidiactl", Type: "c", Major: 195, Minor: 255},
			{Path: "/dev/nvidia0", Type: "c", Major: 195, Minor: 0},
		},
		wantLog: []string{
			"container=ctr pod=ns1/pod1",
			"cdi-devices: k8s.gpu.gpudra.io/claim=uid1-gpu-0",
			"NVIDIA_VISIBLE_DEVICES=GPU-def",
			"GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-def)",
			"device-nodes: /dev/nvidia0,/dev/nvidiactl",
			"env GPUDRA_GPU_0=GPU-def",
		},
	}, {
		name:      "no CDI devices",
		wantNodes: nil,
		wantEnv:   map[string]string{"FROM_POD": "yes"},
		wantLog: []string{
			"container=ctr pod=ns1/pod1",
			"cdi-devices: none",
			"NVIDIA_VISIBLE_DEVICES=unset",
			"device-nodes: none",
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := startRuntime(t, Options{ProductName: func(uuid string) string { return products[uuid] }})
			if len(tc.devices) > 0 {
				writeSpec(t, env.cdiDir, "uid1", tc.devices...)
			}
			sandboxID, sandbox := env.runPod(t, "ns1", "pod1")
			created, err := env.createContainer(sandboxID, sandbox, "ctr", tc.annotations, tc.cdiIDs...)
			require.NoError(t, err)
			st := env.startAndWaitRunning(t, created.ContainerId)
			wantLogPath := filepath.Join(sandbox.LogDirectory, "ctr", "0.log")
			assert.Equal(t, wantLogPath, st.LogPath)

			inj, ok := env.rt.Injected(created.ContainerId)
			require.True(t, ok)
			assert.Equal(t, created.ContainerId, inj.ContainerID)
			assert.Equal(t, "ns1/pod1", inj.Pod)
			assert.Equal(t, wantLogPath, inj.LogPath)
			if tc.wantNodes != nil {
				assert.Equal(t, tc.wantNodes, inj.DeviceNodes)
			}
			if len(tc.devices) > 0 {
				assert.Equal(t, []Mount{{Destination: "/usr/lib/libcuda.so.1", Source: filepath.Join(filepath.Dir(env.cdiDir), "libcuda.so.1"),
					Options: []string{"ro", "bind"}}}, inj.Mounts)
			} else {
				assert.Empty(t, inj.Mounts)
			}
			for key, want := range tc.wantEnv {
				got, ok := inj.Getenv(key)
				assert.True(t, ok, "env %s", key)
				assert.Equal(t, want, got, "env %s", key)
			}
			assert.Equal(t, tc.wantLog, readLog(t, wantLogPath))
		})
	}
}

func TestCreateContainerUnknownDeviceFails(t *testing.T) {
	env := startRuntime(t, Options{})
	writeSpec(t, env.cdiDir, "uid1", gpuDevice("uid1", 3, "GPU-abc"))
	sandboxID, sandbox := env.runPod(t, "ns1", "pod1")

	missing := deviceID("uid2", 5)
	_, err := env.createContainer(sandboxID, sandbox, "ctr", nil, deviceID("uid1", 3), missing)
	require.Error(t, err)
	st, ok := status.FromError(err)
	require.True(t, ok)
	assert.Equal(t, codes.Unknown, st.Code())
	assert.Contains(t, st.Message(), missing)
	assert.Contains(t, st.Message(), "unresolvable CDI devices")

	list, err := env.client.ListContainers(env.ctx, &runtimeapi.ListContainersRequest{})
	require.NoError(t, err)
	assert.Empty(t, list.Containers, "a failed create must leave no container")
}

// A spec that names host paths that do not exist is refused, as on a
// containerd/runc node: the regression of a plugin in a container that wrote
// its own view of the mounted driver root (/driver-root/...) into the spec.
func TestCreateContainerMissingHostPathFails(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edits cdispec.ContainerEdits
		want  string
	}{
		{"library mount", cdispec.ContainerEdits{Mounts: []*cdispec.Mount{{
			HostPath: "/driver-root/usr/lib/x86_64-linux-gnu/libcuda.so.1", ContainerPath: "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
			Options: []string{"ro", "bind"}}}}, "mount /driver-root/usr/lib/x86_64-linux-gnu/libcuda.so.1"},
		{"device node", cdispec.ContainerEdits{DeviceNodes: []*cdispec.DeviceNode{{
			Path: "/dev/nvidiactl", HostPath: "/driver-root/dev/nvidiactl", Type: "c", Major: 195, Minor: 255}}}, "device node /driver-root/dev/nvidiactl"},
		{"hook", cdispec.ContainerEdits{Hooks: []*cdispec.Hook{{
			HookName: "createContainer", Path: "/driver-root/usr/bin/nvidia-cdi-hook", Args: []string{"nvidia-cdi-hook", "update-ldcache"}}}},
			"hook /driver-root/usr/bin/nvidia-cdi-hook"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := startRuntime(t, Options{})
			writeSpecWithEdits(t, env.cdiDir, "uid1", tc.edits, gpuDevice("uid1", 3, "GPU-abc"))
			sandboxID, sandbox := env.runPod(t, "ns1", "pod1")
			_, err := env.createContainer(sandboxID, sandbox, "ctr", nil, deviceID("uid1", 3))
			require.Error(t, err)
			st, ok := status.FromError(err)
			require.True(t, ok)
			assert.Equal(t, codes.Unknown, st.Code())
			assert.Contains(t, st.Message(), tc.want)
			assert.Contains(t, st.Message(), "no such file or directory")
			list, err := env.client.ListContainers(env.ctx, &runtimeapi.ListContainersRequest{})
			require.NoError(t, err)
			assert.Empty(t, list.Containers, "a failed create must leave no container")
		})
	}
}

func TestSpecWrittenAfterStartIsFound(t *testing.T) {
	env := startRuntime(t, Options{})
	sandboxID, sandbox := env.runPod(t, "ns1", "pod1")
	_, err := env.createContainer(sandboxID, sandbox, "ctr", nil, deviceID("uid1", 3))
	require.Error(t, err, "no spec yet")

	writeSpec(t, env.cdiDir, "uid1", gpuDevice("uid1", 3, "GPU-abc"))
	created, err := env.createContainer(sandboxID, sandbox, "ctr", nil, deviceID("uid1", 3))
	require.NoError(t, err)
	inj, ok := env.rt.Injected(created.ContainerId)
	require.True(t, ok)
	assert.True(t, inj.HasDeviceNode("/dev/nvidia3"))
}

func TestTwoContainersShareClaim(t *testing.T) {
	env := startRuntime(t, Options{})
	writeSpec(t, env.cdiDir, "uid1", gpuDevice("uid1", 3, "GPU-abc"))
	sandboxID, sandbox := env.runPod(t, "ns1", "pod1")
	for _, name := range []string{"first", "second"} {
		created, err := env.createContainer(sandboxID, sandbox, name, nil, deviceID("uid1", 3))
		require.NoError(t, err)
		env.startAndWaitRunning(t, created.ContainerId)
		inj, ok := env.rt.Injected(created.ContainerId)
		require.True(t, ok, name)
		assert.True(t, inj.HasDeviceNode("/dev/nvidia3"), name)
		assert.Equal(t, []GPU{{Index: 0, Minor: 3, UUID: "GPU-abc", ProductName: unknownProduct}}, inj.GPUs, name)
		assert.Contains(t, readLog(t, inj.LogPath), "GPU 0: NVIDIA GPU (UUID: GPU-abc)", name)
	}
}

func TestStateFileAndRemoval(t *testing.T) {
	stateFile := filepath.Join(t.TempDir(), "state", "containers.jsonl")
	env := startRuntime(t, Options{StateFile: stateFile})
	writeSpec(t, env.cdiDir, "uid1", gpuDevice("uid1", 3, "GPU-abc"))
	sandboxID, sandbox := env.runPod(t, "ns1", "pod1")
	var ids []string
	for _, name := range []string{"a", "b"} {
		created, err := env.createContainer(sandboxID, sandbox, name, nil, deviceID("uid1", 3))
		require.NoError(t, err)
		ids = append(ids, created.ContainerId)
	}

	recs, err := ReadStateFile(stateFile)
	require.NoError(t, err)
	require.Len(t, recs, 2)
	for n, rec := range recs {
		assert.Equal(t, ids[n], rec.ContainerID)
		assert.Equal(t, "ns1/pod1", rec.Pod)
		assert.Equal(t, "uid-pod1", rec.PodUID)
		assert.Equal(t, []string{deviceID("uid1", 3)}, rec.CDIDevices)
		assert.True(t, rec.HasDeviceNode("/dev/nvidia3"))
		v, _ := rec.Getenv("GPUDRA_GPU_3")
		assert.Equal(t, "GPU-abc", v)
	}

	_, err = env.client.RemoveContainer(env.ctx, &runtimeapi.RemoveContainerRequest{ContainerId: ids[0]})
	require.NoError(t, err)
	_, ok := env.rt.Injected(ids[0])
	assert.False(t, ok, "removed container")
	_, ok = env.rt.Injected(ids[1])
	assert.True(t, ok, "other container")
}

// TestKubeletStartupCalls covers what the kubelet checks before it runs pods:
// a ready runtime and network, a version, and pulled images with a size.
func TestKubeletStartupCalls(t *testing.T) {
	env := startRuntime(t, Options{})
	st, err := env.client.Status(env.ctx, &runtimeapi.StatusRequest{})
	require.NoError(t, err)
	ready := map[string]bool{}
	for _, cond := range st.Status.Conditions {
		ready[cond.Type] = cond.Status
	}
	assert.Equal(t, map[string]bool{runtimeapi.RuntimeReady: true, runtimeapi.NetworkReady: true}, ready)

	v, err := env.client.Version(env.ctx, &runtimeapi.VersionRequest{Version: "v1"})
	require.NoError(t, err)
	assert.NotEmpty(t, v.RuntimeName)

	pulled, err := env.images.PullImage(env.ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: testImage}})
	require.NoError(t, err)
	img, err := env.images.ImageStatus(env.ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: pulled.ImageRef}})
	require.NoError(t, err)
	require.NotNil(t, img.Image)
	assert.NotEmpty(t, img.Image.Id)
	assert.NotZero(t, img.Image.Size, "the CRI client rejects images of size 0")
}

func TestStopRemovesSocketAndStartReplacesStale(t *testing.T) {
	env := startRuntime(t, Options{})
	env.rt.Stop()
	_, err := os.Stat(env.socket)
	assert.ErrorIs(t, err, os.ErrNotExist)
	env.rt.Stop() // idempotent

	// A socket left behind by a killed runtime is replaced; other files are not.
	rt2, err := New(Options{CDISpecDirs: []string{env.cdiDir}})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(env.socket, nil, 0o600))
	assert.Error(t, rt2.Start(env.ctx, env.socket), "a regular file is not replaced")
	require.NoError(t, os.Remove(env.socket))
	stale, err := net.Listen("unix", env.socket)
	require.NoError(t, err)
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	require.NoError(t, stale.Close())
	require.FileExists(t, env.socket)
	require.NoError(t, rt2.Start(env.ctx, env.socket))
	_, err = rt2.Status(env.ctx, &runtimeapi.StatusRequest{})
	require.NoError(t, err)
	rt2.Stop()
}
