package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestExitStatus: without a driver under the root the only check, opening
// NVML, fails: exit status 1, a report that ends with the summary (text) or
// says so (JSON). Usage errors exit 2.
func TestExitStatus(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantStatus int
		check      func(t *testing.T, stdout string)
	}{
		{
			name: "text", args: []string{"-nvidia-driver-root", t.TempDir(), "-watch", "1s"}, wantStatus: 1,
			check: func(t *testing.T, out string) {
				lines := strings.Split(strings.TrimSpace(out), "\n")
				require.Contains(t, lines[1], "READ-ONLY")
				require.Contains(t, out, "FAIL  open and initialize NVML: NVML library not found")
				require.Equal(t, "0 passed, 1 failed", lines[len(lines)-1])
			},
		},
		{
			name: "json", args: []string{"--nvidia-driver-root=" + t.TempDir(), "--watch=1s", "-json"}, wantStatus: 1,
			check: func(t *testing.T, out string) {
				var rep struct {
					ReadOnly       string
					Passed, Failed int
				}
				require.NoError(t, json.Unmarshal([]byte(out), &rep))
				require.Equal(t, 1, rep.Failed)
				require.Contains(t, rep.ReadOnly, "READ-ONLY")
			},
		},
		{
			name: "fail on table corrections", args: []string{"-nvidia-driver-root", t.TempDir(), "-watch", "1s", "-fail-on-table-corrections"},
			wantStatus: 1,
			check: func(t *testing.T, out string) {
				require.NotContains(t, out, "6. NVML fidelity table", "no table check without NVML")
			},
		},
		{name: "unknown flag", args: []string{"-mig=dynamic"}, wantStatus: 2},
		{name: "stray argument", args: []string{"now"}, wantStatus: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			require.Equal(t, tc.wantStatus, run(tc.args, &stdout, &stderr), stderr.String())
			if tc.check != nil {
				tc.check(t, stdout.String())
			}
		})
	}
}
