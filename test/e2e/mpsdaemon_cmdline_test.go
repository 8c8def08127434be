//go:build e2e

package e2e

import "testing"

// The process scan of the MPS tests counts daemons, not the control tool's
// client runs beside them.
func TestIsMPSDaemon(t *testing.T) {
	for _, tc := range []struct {
		cmdline string
		want    bool
	}{
		{"/driver-root/usr/bin/nvidia-cuda-mps-control\x00-f\x00", true},
		{"nvidia-cuda-mps-control\x00-d\x00", true},
		{"/usr/bin/nvidia-cuda-mps-control\x00", false}, // a client: commands on stdin
		{"gpu-kubelet-plugin\x00mps-control-daemon\x00--control=/usr/bin/nvidia-cuda-mps-control\x00-f\x00", false},
		{"sleep\x00-f\x00", false},
		{"", false},
	} {
		if got := isMPSDaemon(tc.cmdline); got != tc.want {
			t.Errorf("isMPSDaemon(%q) = %v, want %v", tc.cmdline, got, tc.want)
		}
	}
}
