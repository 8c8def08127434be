package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2/ktesting"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/test/fakecri"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    *options
		wantErr string
	}{
		{
			name: "defaults",
			args: []string{"--listen=/run/cri.sock"},
			want: &options{listen: "/run/cri.sock", cdiSpecDirs: []string{"/etc/cdi", "/var/run/cdi"}},
		},
		{
			name: "everything",
			args: []string{"--listen", "/s", "--cdi-spec-dir=/a", "--cdi-spec-dir", "/b,/c", "--gpu-info=/g.json", "--state-file=/st", "-v=4"},
			want: &options{listen: "/s", cdiSpecDirs: []string{"/a", "/b", "/c"}, gpuInfo: "/g.json", stateFile: "/st"},
		},
		{name: "no listen", args: []string{"--cdi-spec-dir=/a"}, wantErr: "--listen is required"},
		{name: "unknown flag", args: []string{"--listen=/s", "--bogus"}, wantErr: "bogus"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseFlags(tc.args)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// TestRun serves until cancelled, resolves product names from the
// --gpu-info file, appends to the state file and removes its socket.
func TestRun(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	root := t.TempDir()
	cdiDir := filepath.Join(root, "cdi")
	require.NoError(t, os.MkdirAll(cdiDir, 0o755))
	writeJSON(t, filepath.Join(root, "gpus.json"), map[string]string{"GPU-abc": "NVIDIA H100 80GB HBM3"})
	writeJSON(t, filepath.Join(cdiDir, "claim.json"), &cdispec.Spec{
		Version: "0.6.0", Kind: "k8s.gpu.gpudra.io/claim",
		Devices: []cdispec.Device{{Name: "uid1-gpu-3", ContainerEdits: cdispec.ContainerEdits{
			Env:         []string{"NVIDIA_VISIBLE_DEVICES=GPU-abc", "GPUDRA_GPU_3=GPU-abc"},
			DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/nvidia3", Type: "c", Major: 195, Minor: 3}},
		}}},
	})
	sockDir, err := os.MkdirTemp("", "fcri")
	require.NoError(t, err)
	defer os.RemoveAll(sockDir)
	opts := &options{
		listen:      filepath.Join(sockDir, "cri.sock"),
		cdiSpecDirs: []string{cdiDir},
		stateFile:   filepath.Join(root, "state.jsonl"),
	}
	done := make(chan error, 1)
	go func() { done <- run(ctx, opts) }()

	conn, err := grpc.NewClient("unix://"+opts.listen, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	client := runtimeapi.NewRuntimeServiceClient(conn)
	require.Eventually(t, func() bool {
		_, err := client.Status(ctx, &runtimeapi.StatusRequest{})
		return err == nil
	}, 10*time.Second, 20*time.Millisecond)

	sandbox := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "ns", Uid: "u"},
		LogDirectory: filepath.Join(root, "pods", "ns_p_u"),
	}
	ran, err := client.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sandbox})
	require.NoError(t, err)
	created, err := client.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: ran.PodSandboxId, SandboxConfig: sandbox,
		Config: &runtimeapi.ContainerConfig{
			Metadata:   &runtimeapi.ContainerMetadata{Name: "c"},
			Image:      &runtimeapi.ImageSpec{Image: "img"},
			CDIDevices: []*runtimeapi.CDIDevice{{Name: "k8s.gpu.gpudra.io/claim=uid1-gpu-3"}},
			LogPath:    "c/0.log",
		},
	})
	require.NoError(t, err)
	_, err = client.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: created.ContainerId})
	require.NoError(t, err)

	log, err := os.ReadFile(filepath.Join(sandbox.LogDirectory, "c", "0.log"))
	require.NoError(t, err)
	assert.Contains(t, string(log), " stdout F GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-abc)\n")
	recs, err := fakecri.ReadStateFile(opts.stateFile)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	assert.Equal(t, created.ContainerId, recs[0].ContainerID)

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancel")
	}
	assert.NoFileExists(t, opts.listen)
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := json.Marshal(v)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, data, 0o644))
}
