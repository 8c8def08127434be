package fidelity

import (
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		doc     string
		want    []Row
		wantErr string
	}{
		{name: "rows under their section", doc: "# T\n\n## Discovery\n\n| call | models | real | source | simulator | test |\n|---|---|---|---|---|---|\n" +
			"| `nvmlDeviceGetName` | all | SUCCESS | h | SUCCESS | TestA |\n\n## MIG\n| `DeviceGetMigMode` | l4 | NOT_SUPPORTED: no MIG | h | NOT_SUPPORTED | `TestB` |\n",
			want: []Row{
				{Section: "Discovery", Call: "nvmlDeviceGetName", Models: "all", Real: "SUCCESS", Source: "h", Simulator: "SUCCESS", Test: "TestA", Line: 7},
				{Section: "MIG", Call: "DeviceGetMigMode", Models: "l4", Real: "NOT_SUPPORTED: no MIG", Source: "h", Simulator: "NOT_SUPPORTED",
					Test: "`TestB`", Line: 10},
			}},
		{name: "no table", doc: "# T\ntext\n"},
		{name: "five columns", doc: "## S\n| `x` | all | SUCCESS | h | SUCCESS |\n", wantErr: "docs/nvml-fidelity.md:2: a row has six columns"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.doc))
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// TestTableParses: the embedded document is the table's, and every row of
// a call this package makes names its models in a form Check understands.
func TestTableParses(t *testing.T) {
	rows, err := Table()
	require.NoError(t, err)
	require.NotEmpty(t, rows)
	catalogue, err := Catalogue()
	require.NoError(t, err)
	callable := 0
	for _, r := range rows {
		if _, ok := CallFor(r.Call); ok {
			callable++
			_, err := ParseModels(r.Models, catalogue)
			require.NoError(t, err, r.Text())
		}
	}
	require.Greater(t, callable, 30)
}

func TestReturnCodes(t *testing.T) {
	tests := []struct {
		col  string
		want []nvml.Return
	}{
		{"SUCCESS", []nvml.Return{nvml.SUCCESS}},
		{"SUCCESS; NOT_SUPPORTED in MIG mode", []nvml.Return{nvml.SUCCESS, nvml.ERROR_NOT_SUPPORTED}},
		{"SUCCESS / GPU_IS_LOST / RESET_REQUIRED (faults lost)", []nvml.Return{nvml.SUCCESS, nvml.ERROR_GPU_IS_LOST, nvml.ERROR_RESET_REQUIRED}},
		{"NOT_SUPPORTED (highest CPU node of the PROFILE)", []nvml.Return{nvml.ERROR_NOT_SUPPORTED}},
		{"the GPU answers SUCCESS", nil},
		{"MAYBE SUCCESS", nil},
	}
	for _, tc := range tests {
		t.Run(tc.col, func(t *testing.T) {
			require.Equal(t, tc.want, ReturnCodes(tc.col))
		})
	}
}

// TestCodeNames: every code the table may name round-trips, whatever
// Return.String answers.
func TestCodeNames(t *testing.T) {
	for ret, name := range returnNames {
		got, ok := ReturnByName(name)
		require.True(t, ok, name)
		require.Equal(t, ret, got)
		if ret != nvml.SUCCESS {
			got, ok = ReturnByName("ERROR_" + name) // go-nvml's constant's name
			require.True(t, ok, name)
			require.Equal(t, ret, got)
		}
		require.Equal(t, name, CodeName(ret))
	}
	require.Equal(t, "return code 12345", CodeName(nvml.Return(12345)))
	_, ok := ReturnByName("NOT_A_CODE")
	require.False(t, ok)
}

// TestCallsOnlyRead: the kit makes every call of this package on real
// GPUs, so each one must only read (go-nvml's Get and Query calls).
func TestCallsOnlyRead(t *testing.T) {
	for _, name := range CallNames() {
		verb := name
		for _, object := range []string{"System", "Device", "Gpm"} {
			verb = strings.TrimPrefix(verb, object)
		}
		require.True(t, strings.HasPrefix(verb, "Get") || strings.HasPrefix(verb, "Query"), "%s does not only read", name)
	}
	for _, mutating := range []string{"DeviceSetMigMode", "nvmlDeviceResetGpuLockedClocks", "DeviceCreateGpuInstanceWithPlacement",
		"GpuInstanceDestroy, ComputeInstanceDestroy", "EventSetCreate, EventSetWait, EventSetFree"} {
		_, ok := CallFor(mutating)
		require.False(t, ok, mutating)
	}
}
