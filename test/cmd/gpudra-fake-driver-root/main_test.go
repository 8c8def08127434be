package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRun(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
	}{
		{"help", []string{"--help"}, 0, "--nvml-library"},
		{"unknown flag", []string{"--gpus=3"}, 2, "unknown flag: --gpus"},
		{"stray argument", []string{"--dir=/tmp/x", "extra"}, 2, `unexpected arguments ["extra"]`},
		{"missing node", []string{"--dir=" + t.TempDir(), "--profile=l4", "--nvml-library=/x.so"}, 1, "no node name given: set --node"},
		{"missing library", []string{"--dir=" + t.TempDir(), "--profile=nope", "--node=n", "--nvml-library=/x.so"}, 1, "make sim-nvml-lib"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			require.Equal(t, tc.wantCode, run(tc.args, &stdout, &stderr), stderr.String())
			require.Contains(t, stdout.String()+stderr.String(), tc.wantOut)
		})
	}
}
