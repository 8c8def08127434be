package cdi

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2/textlogger"
)

// TestNvcdiLogger drives the adapter nvcdi gets at each verbosity: each
// nvcdi severity appears from its V level on, as one structured klog line
// named "nvcdi" with the formatted message and a "level" key; errors always.
func TestNvcdiLogger(t *testing.T) {
	logAll := func(l *nvcdiLog) {
		l.Errorf("failed to shutdown NVML: %v", "ERROR_UNKNOWN")
		l.Warningf("Could not locate %v: %v", "libnvidia-egl-wayland.so.*.*", "pattern not found")
		l.Infof("Selecting %v as %v", "/dev/nvidia0", "/dev/nvidia0")
		l.Debugf("Locating %q", "libcuda.so")
		l.Tracef("trace %d", 7)
	}
	lines := map[string]string{
		"error":   `E] "failed to shutdown NVML: ERROR_UNKNOWN" logger="nvcdi" level="error"`,
		"warning": `I] "Could not locate libnvidia-egl-wayland.so.*.*: pattern not found" logger="nvcdi" level="warning"`,
		"info":    `I] "Selecting /dev/nvidia0 as /dev/nvidia0" logger="nvcdi" level="info"`,
		"debug":   `I] "Locating \"libcuda.so\"" logger="nvcdi" level="debug"`,
		"trace":   `I] "trace 7" logger="nvcdi" level="trace"`,
	}
	for _, tc := range []struct {
		v    int
		want []string
	}{
		{0, []string{"error"}},
		{2, []string{"error"}}, // the chart's default: quiet
		{3, []string{"error", "warning"}},
		{4, []string{"error", "warning"}},
		{5, []string{"error", "warning", "info"}},
		{6, []string{"error", "warning", "info", "debug"}},
		{7, []string{"error", "warning", "info", "debug", "trace"}},
	} {
		var buf bytes.Buffer
		logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(tc.v), textlogger.Output(&buf)))
		logAll(nvcdiLogger(logger))
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			// Drop the header's date, time, thread and file:line.
			if i := strings.Index(line, "] "); i > 0 && line != "" {
				line = line[:1] + line[i:]
			}
			got = append(got, line)
		}
		var want []string
		for _, level := range tc.want {
			want = append(want, lines[level])
		}
		require.Equal(t, want, got, "-v=%d", tc.v)
	}
}
