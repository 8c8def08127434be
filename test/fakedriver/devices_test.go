package fakedriver

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestProcDevices: every character device of the driver has its own major
// in proc/devices, IMEX channels included (readers look a name up exactly:
// nvidia-caps is not nvidia-caps-imex-channels).
func TestProcDevices(t *testing.T) {
	majors := map[string]int{}
	for _, l := range strings.Split(string(procDevices()), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		if n, err := strconv.Atoi(f[0]); err == nil {
			majors[f[1]] = n
		}
	}
	tests := []struct {
		name  string
		major int
	}{
		{"nvidia-frontend", FrontendMajor},
		{"nvidia-uvm", UVMMajor},
		{"nvidia-caps", CapsMajor},
		{"nvidia-caps-imex-channels", IMEXChannelsMajor},
		{"vfio", VFIOMajor},
	}
	seen := map[int]string{}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.major, majors[tc.name])
			require.Empty(t, seen[tc.major], "major %d used twice", tc.major)
			seen[tc.major] = tc.name
			require.True(t, tc.major >= 120 && tc.major <= 127, "outside the kernel's local/experimental range")
		})
	}
	require.Len(t, majors, len(tests))
}
