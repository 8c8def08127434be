package sharing

import "testing"

// The plugin's adoption check and the tests' process scans count daemons,
// not the control tool's client runs beside them, nor the daemon Pod's
// wrapper.
func TestIsControlDaemonCmdline(t *testing.T) {
	for _, tc := range []struct {
		cmdline string
		want    bool
	}{
		{"/driver-root/usr/bin/nvidia-cuda-mps-control\x00-f\x00", true},
		{"nvidia-cuda-mps-control\x00-d\x00", true},
		{"/opt/custom/mps-ctl\x00-f\x00", true},         // --mps-control-path names it anything
		{"/usr/bin/nvidia-cuda-mps-control\x00", false}, // a client: commands on stdin
		{"/usr/bin/nvidia-cuda-mps-control\x00-fx\x00", false},
		{"gpu-kubelet-plugin\x00mps-control-daemon\x00--control=/usr/bin/nvidia-cuda-mps-control\x00-f\x00", false},
		{"/bin/sh\x00/tmp/fake-control\x00-f\x00", false}, // an interpreter's argv: not the tool itself
		{"", false},
	} {
		if got := IsControlDaemonCmdline([]byte(tc.cmdline)); got != tc.want {
			t.Errorf("IsControlDaemonCmdline(%q) = %v, want %v", tc.cmdline, got, tc.want)
		}
	}
}

func TestPipeDirectoryOf(t *testing.T) {
	for _, tc := range []struct {
		environ, want string
		ok            bool
	}{
		{"PATH=/usr/bin\x00CUDA_MPS_PIPE_DIRECTORY=/run/mps/pipe\x00HOME=/\x00", "/run/mps/pipe", true},
		{"CUDA_MPS_PIPE_DIRECTORY_X=/a\x00", "", false},
		{"", "", false},
	} {
		got, ok := PipeDirectoryOf([]byte(tc.environ))
		if got != tc.want || ok != tc.ok {
			t.Errorf("PipeDirectoryOf(%q) = %q, %v; want %q, %v", tc.environ, got, ok, tc.want, tc.ok)
		}
	}
}
