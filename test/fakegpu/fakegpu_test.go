package fakegpu

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNvidiaSMI(t *testing.T) {
	const uuid = "GPU-c430a68b-d9df-5dd3-aa1b-d89185d86591"
	state := t.TempDir()
	t.Setenv(StateDirEnv, state)
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
		wantFile string
	}{
		{"set", []string{"compute-policy", "-i", uuid, "--set-timeslice=2"}, 0, "Set timeslice to 2", "2"},
		{"get", []string{"compute-policy", "-i", uuid, "--get-timeslice"}, 0, "timeslice 2", "2"},
		{"out of range", []string{"compute-policy", "-i", uuid, "--set-timeslice=4"}, 2, "Invalid timeslice value", "2"},
		{"unknown GPU", []string{"compute-policy", "-i", "3", "--set-timeslice=1"}, 6, "No devices were found", "2"},
		{"other subcommand", []string{"-q"}, 2, "only -L, 'compute-policy' and the MIG commands", "2"},
		{"unknown flag", []string{"compute-policy", "--reset"}, 2, "Invalid combination", "2"},
		{"back to default", []string{"compute-policy", "-i", uuid, "--set-timeslice=0"}, 0, "Set timeslice to 0", "0"},
		{"lost", []string{"compute-policy", "-i", uuid, "--set-timeslice=2"}, 15, "GPU is lost", "0"},
		{"lost by XID 79", []string{"compute-policy", "-i", uuid, "--get-timeslice"}, 15, "GPU is lost", "0"},
		{"reset", []string{"compute-policy", "-i", uuid, "--set-timeslice=1"}, 0, "Set timeslice to 1", "1"},
	}
	faults := map[string]string{"lost": "gpu-0 xid 79\n" + strings.ToLower(uuid) + " lost # by UUID\n",
		"lost by XID 79": uuid + " xid 79\n", "reset": "gpu-0 lost\n"}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, os.WriteFile(filepath.Join(state, FaultFileName), []byte(faults[tc.name]), 0o644))
			var out bytes.Buffer
			require.Equal(t, tc.wantCode, NvidiaSMI(tc.args, &out, &out), out.String())
			require.Contains(t, out.String(), tc.wantOut)
			b, err := os.ReadFile(TimeSlicePath(state, uuid))
			require.NoError(t, err)
			require.Equal(t, tc.wantFile, strings.TrimSpace(string(b)))
		})
	}
	t.Setenv(StateDirEnv, "")
	var out bytes.Buffer
	require.Equal(t, 2, NvidiaSMI([]string{"compute-policy"}, &out, &out))
}

func TestMPSDaemonCommands(t *testing.T) {
	logDir := t.TempDir()
	f, err := os.Create(filepath.Join(logDir, ControlLog))
	require.NoError(t, err)
	defer f.Close()
	d := &daemon{logDir: logDir, log: f, state: MPSState{Devices: []string{"GPU-a", "GPU-b"}, PinnedMemLimits: map[string]string{}}}
	for _, tc := range []struct {
		cmd, answer string
		quit        bool
	}{
		{"get_default_active_thread_percentage", "100.0", false},
		{"set_default_active_thread_percentage 40", "", false},
		{"set_default_active_thread_percentage 140", "", false},
		{"set_default_device_pinned_mem_limit 1 2048M", "", false},
		{"set_default_device_pinned_mem_limit 2 2048M", "", false},
		{"set_default_device_pinned_mem_limit 0 lots", "", false},
		{"get_default_active_thread_percentage", "40.0", false},
		{"get_server_list", "", false},
		{"start_server -uid 0", "", false},
		{"quit", "", true},
	} {
		quit, answer := d.handle(strings.Fields(tc.cmd))
		require.Equal(t, tc.quit, quit, tc.cmd)
		require.Equal(t, tc.answer, answer, tc.cmd)
	}
	require.NoError(t, d.save())
	st, err := ReadMPSState(logDir)
	require.NoError(t, err)
	require.Equal(t, 40, st.ActiveThreadPercentage)
	require.Equal(t, map[string]string{"1": "2048M"}, st.PinnedMemLimits)
	log, err := os.ReadFile(filepath.Join(logDir, ControlLog))
	require.NoError(t, err)
	require.Contains(t, string(log), `Error: invalid device "2" (daemon has 2 devices)`)
	require.Contains(t, string(log), `Error: unknown command "start_server -uid 0"`)
}
