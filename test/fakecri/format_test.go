package fakecri

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2/ktesting"
)

func TestParseGPUInfo(t *testing.T) {
	tests := []struct {
		name    string
		data    string
		want    map[string]string
		wantErr bool
	}{
		{name: "uuid to name", data: `{"GPU-a": "NVIDIA H100 80GB HBM3"}`, want: map[string]string{"GPU-a": "NVIDIA H100 80GB HBM3"}},
		{name: "uuid to object", data: `{"GPU-a": {"productName": "NVIDIA L4"}}`, want: map[string]string{"GPU-a": "NVIDIA L4"}},
		{
			name: "list", data: `[{"uuid": "GPU-a", "productName": "NVIDIA L4"}, {"uuid": "GPU-b", "productName": "NVIDIA T4"}, {"productName": "no uuid"}]`,
			want: map[string]string{"GPU-a": "NVIDIA L4", "GPU-b": "NVIDIA T4"},
		},
		{
			name: "node with gpus", data: `{"driverVersion": "550.54.15", "gpus": [{"uuid": "GPU-a", "minor": 3, "productName": "NVIDIA A10"}]}`,
			want: map[string]string{"GPU-a": "NVIDIA A10"},
		},
		{name: "not JSON", data: `GPU-a: x`, wantErr: true},
		{name: "bad entry", data: `{"GPU-a": 3}`, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseGPUInfo([]byte(tc.data))
			if tc.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestFileProductLookup(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	root := t.TempDir()
	cdiDirs := []string{filepath.Join(root, "a", "cdi"), filepath.Join(root, "b", "cdi") + "/"}
	paths := DefaultGPUInfoPaths(cdiDirs)
	assert.Equal(t, []string{filepath.Join(root, "a", "gpus.json"), filepath.Join(root, "b", "gpus.json")}, paths)
	lookup := FileProductLookup(logger, paths...)

	assert.Empty(t, lookup("GPU-a"), "no files yet")
	require.NoError(t, os.MkdirAll(filepath.Join(root, "a"), 0o755))
	require.NoError(t, os.WriteFile(paths[0], []byte(`{"GPU-a": "broken`), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "b"), 0o755))
	require.NoError(t, os.WriteFile(paths[1], []byte(`{"GPU-a": "NVIDIA T4"}`), 0o644))
	assert.Equal(t, "NVIDIA T4", lookup("GPU-a"), "unreadable file skipped")

	require.NoError(t, os.WriteFile(paths[0], []byte(`{"GPU-a": "NVIDIA L4"}`), 0o644))
	assert.Equal(t, "NVIDIA L4", lookup("GPU-a"), "files are re-read, first one wins")
	assert.Empty(t, lookup("GPU-z"))
}

func TestParseLogLine(t *testing.T) {
	tests := []struct {
		line    string
		want    LogRecord
		wantErr bool
	}{
		{
			line: "2026-01-02T03:04:05.000000006Z stdout F GPU 0: NVIDIA L4 (UUID: GPU-a)",
			want: LogRecord{Time: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), Stream: "stdout", Text: "GPU 0: NVIDIA L4 (UUID: GPU-a)"},
		},
		{
			line: "2026-01-02T03:04:05Z stderr P partial",
			want: LogRecord{Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Stream: "stderr", Partial: true, Text: "partial"},
		},
		{line: "2026-01-02T03:04:05Z stdout F", want: LogRecord{Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Stream: "stdout"}},
		{line: "yesterday stdout F x", wantErr: true},
		{line: "2026-01-02T03:04:05Z stdin F x", wantErr: true},
		{line: "2026-01-02T03:04:05Z stdout X x", wantErr: true},
		{line: "text only", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.line, func(t *testing.T) {
			got, err := ParseLogLine(tc.line)
			if tc.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.True(t, tc.want.Time.Equal(got.Time), "time %v", got.Time)
			got.Time = tc.want.Time
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestLogLinesAndFile(t *testing.T) {
	inj := Injection{
		Container:  "c",
		Pod:        "ns/p",
		CDIDevices: []string{"k8s.gpu.gpudra.io/claim=u-gpu-10", "k8s.gpu.gpudra.io/claim=u-gpu-9"},
		DeviceNodes: []DeviceNode{
			{Path: "/dev/nvidia-uvm"}, {Path: "/dev/nvidia10"}, {Path: "/dev/nvidiactl"}, {Path: "/dev/nvidia9"},
		},
		Env:    []string{"PATH=/bin", "GPUDRA_Z=1\nsecond line", "GPUDRA_A=2", "NVIDIA_VISIBLE_DEVICES=", "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps"},
		GPUs:   []GPU{{Index: 0, Minor: 9, ProductName: unknownProduct}},
		Mounts: []Mount{{Destination: "/tmp/nvidia-mps", Source: "/var/lib/mps/u/pipe"}},
	}
	want := []string{
		"container=c pod=ns/p",
		"cdi-devices: k8s.gpu.gpudra.io/claim=u-gpu-10,k8s.gpu.gpudra.io/claim=u-gpu-9",
		"NVIDIA_VISIBLE_DEVICES=",
		"GPU 0: NVIDIA GPU (UUID: unknown)",
		"device-nodes: /dev/nvidia9,/dev/nvidia10,/dev/nvidia-uvm,/dev/nvidiactl",
		"env CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps",
		"env GPUDRA_A=2",
		"env GPUDRA_Z=1\nsecond line",
		"mount /tmp/nvidia-mps <- /var/lib/mps/u/pipe",
	}
	assert.Equal(t, want, inj.LogLines())

	path := filepath.Join(t.TempDir(), "missing", "dir", "0.log")
	require.NoError(t, writeContainerLog(path, inj.LogLines()))
	want[len(want)-2] = `env GPUDRA_Z=1\nsecond line`
	assert.Equal(t, want, readLog(t, path), "one record per line, embedded newline escaped")
}
