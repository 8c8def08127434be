package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRun(t *testing.T) {
	dev := t.TempDir()
	for _, n := range []string{"nvidia2", "nvidiactl"} {
		require.NoError(t, os.WriteFile(filepath.Join(dev, n), nil, 0o666))
	}
	absent := filepath.Join(dev, "absent")
	for name, tc := range map[string]struct {
		args, environ  []string
		code           int
		stdout, stderr string
	}{
		"one GPU": {[]string{"--dev", dev, "--proc", absent}, []string{"GPUDRA_GPU_2=GPU-x"}, 0,
			"GPU 0: unknown product (UUID: GPU-x)\n", ""},
		"verbose": {[]string{"--dev", dev, "--proc", absent, "-v"}, []string{"PATH=/bin", "GPUDRA_GPU_2=GPU-x", "CUDA_MPS_PIPE_DIRECTORY=/m"}, 0,
			"GPU 0: unknown product (UUID: GPU-x)\ndev /dev/nvidia2\ndev /dev/nvidiactl\nenv CUDA_MPS_PIPE_DIRECTORY=/m\nenv GPUDRA_GPU_2=GPU-x\n", ""},
		"warning": {[]string{"--dev", dev, "--proc", absent}, []string{"GPUDRA_GPU_2=GPU-x", "GPUDRA_GPU_5=GPU-y"}, 0,
			"GPU 0: unknown product (UUID: GPU-x)\n", "gpudra-gpus: warning: GPUDRA_GPU_5=GPU-y, but /dev/nvidia5 is missing: that GPU cannot be used\n"},
		"no GPU": {[]string{"--dev", t.TempDir(), "--proc", absent}, nil, 1, "",
			"gpudra-gpus: no GPU visible in this container: no /dev/nvidia<N> device node (0 GPUDRA_GPU_* and 0 GPUDRA_MIG_* variables)\n"},
		"no dev":   {[]string{"--dev", absent}, nil, 1, "", "gpudra-gpus: list device nodes: open " + absent + ": no such file or directory\n"},
		"bad args": {[]string{"extra"}, nil, 2, "", "gpudra-gpus: unexpected arguments [\"extra\"]\n"},
		"bad flag": {[]string{"--nope"}, nil, 2, "", "gpudra-gpus: unknown flag: --nope\n"},
	} {
		var stdout, stderr strings.Builder
		assert.Equal(t, tc.code, run(tc.args, tc.environ, &stdout, &stderr), name)
		assert.Equal(t, tc.stdout, stdout.String(), name)
		assert.Equal(t, tc.stderr, stderr.String(), name)
	}
}
