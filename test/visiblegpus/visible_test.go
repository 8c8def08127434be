package visiblegpus

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseEnv(t *testing.T) {
	none := func() map[int]string { return map[int]string{} }
	for name, tc := range map[string]struct {
		environ []string
		want    Env
	}{
		"nothing": {[]string{"PATH=/bin", "HOME=/"}, Env{GPUs: none(), Parents: none(), Products: none()}},
		"gpus": {[]string{"GPUDRA_GPU_3=GPU-c", "GPUDRA_GPU_0=GPU-a", "GPUDRA_GPU_1=", "GPUDRA_GPU_X=GPU-x", "GPUDRA_GPU_2_PRODUCT=H100",
			"GPUDRA_GPU_3_PRODUCT=", "GPUDRA_GPU_X_PRODUCT=L4"},
			Env{GPUs: map[int]string{3: "GPU-c", 0: "GPU-a"}, Parents: none(), Products: map[int]string{2: "H100"}}},
		"mig": {[]string{"GPUDRA_MIG_4_2_0=MIG-b", "GPUDRA_MIG_4_1=MIG-x"},
			Env{GPUs: none(), Parents: none(), Products: none(), MIG: []EnvMIG{{Minor: 4, GI: 2, CI: 0, UUID: "MIG-b"}}}},
		"mig with profile and parent": {[]string{"GPUDRA_MIG_4_2_0_PROFILE=1g.10gb+me", "GPUDRA_MIG_4_2_0=MIG-b", "GPUDRA_MIG_4_3_0=MIG-c",
			"GPUDRA_MIG_4_PARENT=GPU-p", "GPUDRA_MIG_5_1_0_PROFILE=2g.20gb", "GPUDRA_MIG_4_PROFILE=x"},
			Env{GPUs: none(), Parents: map[int]string{4: "GPU-p"}, Products: none(), MIG: []EnvMIG{
				{Minor: 4, GI: 2, CI: 0, UUID: "MIG-b", Profile: "1g.10gb+me"}, {Minor: 4, GI: 3, CI: 0, UUID: "MIG-c"}}}},
		"sharing": {[]string{"GPUDRA_SHARING_STRATEGY=TimeSlicing", "GPUDRA_TIMESLICE_INTERVAL=Long",
			"CUDA_MPS_PIPE_DIRECTORY=/mps/x", "GPUDRA_OTHER=1", "broken"},
			Env{GPUs: none(), Parents: none(), Products: none(), Sharing: []string{"GPUDRA_SHARING_STRATEGY=TimeSlicing", "GPUDRA_TIMESLICE_INTERVAL=Long",
				"CUDA_MPS_PIPE_DIRECTORY=/mps/x"}}},
	} {
		assert.Equal(t, tc.want, ParseEnv(tc.environ), name)
	}
}

// info is an information file in the driver's layout (tabs and all).
func info(model, uuid, bus string, minor string) string {
	return "Model: \t\t " + model + "\nIRQ:   \t\t 0\nGPU UUID: \t " + uuid + "\nVideo BIOS: \t ??.??.??.??.??\n" +
		"Bus Location: \t " + bus + "\nDevice Minor: \t " + minor + "\nGPU Excluded:\t No\n"
}

func TestParseProcInformation(t *testing.T) {
	for name, tc := range map[string]struct {
		data    string
		want    ProcGPU
		wantErr string
	}{
		"full": {info("NVIDIA H100 80GB HBM3", "GPU-abc", "0000:1b:00.0", "3"),
			ProcGPU{Model: "NVIDIA H100 80GB HBM3", UUID: "GPU-abc", BusID: "0000:1b:00.0", Minor: 3}, ""},
		"model with colon": {"Model: \t\t Tesla: X\nDevice Minor: \t 0\n", ProcGPU{Model: "Tesla: X", Minor: 0}, ""},
		"no minor":         {"Model: \t\t X\n", ProcGPU{}, "no Device Minor"},
		"bad minor":        {"Device Minor: \t x\n", ProcGPU{}, `device minor "x"`},
	} {
		got, err := ParseProcInformation(tc.data)
		if tc.wantErr != "" {
			if assert.Error(t, err, name) {
				assert.Contains(t, err.Error(), tc.wantErr, name)
			}
			continue
		}
		require.NoError(t, err, name)
		assert.Equal(t, tc.want, got, name)
	}
}

func TestDiscover(t *testing.T) {
	h100 := ProcGPU{Model: "NVIDIA H100 80GB HBM3", UUID: "GPU-h1", Minor: 1}
	a100 := ProcGPU{Model: "NVIDIA A100-SXM4-40GB", UUID: "GPU-a4", Minor: 4}
	control := []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"}
	for name, tc := range map[string]struct {
		in           Inputs
		want         string // Format's output
		warnings     []string
		wantErr      string
		wantNoGPUErr bool
	}{
		"one GPU, simulated: no product name": {
			in:   Inputs{Environ: []string{"GPUDRA_GPU_3=GPU-s3"}, DevNodes: append(control, "nvidia3")},
			want: "GPU 0: unknown product (UUID: GPU-s3)\n",
		},
		"two GPUs numbered by minor, products from /proc": {
			in: Inputs{Environ: []string{"GPUDRA_GPU_1=GPU-h1", "GPUDRA_GPU_0=GPU-x"},
				DevNodes: append(control, "nvidia1", "nvidia0"), Proc: []ProcGPU{h100, a100}},
			want: "GPU 0: unknown product (UUID: GPU-x)\nGPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-h1)\n",
		},
		"UUID from /proc when no variable names it": {
			in:   Inputs{DevNodes: []string{"nvidia1"}, Proc: []ProcGPU{h100, a100}},
			want: "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-h1)\n",
		},
		"MIG devices under their GPU, by GI and CI": {
			in: Inputs{Environ: []string{"GPUDRA_MIG_4_5_0=MIG-2", "GPUDRA_MIG_4_3_1=MIG-1"},
				DevNodes: append(control, "nvidia4"), CapNodes: []string{"nvidia-cap1", "nvidia-cap2"}, Proc: []ProcGPU{a100}},
			want: "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-a4)\n  MIG Device 0: GI 3 CI 1 (UUID: MIG-1)\n  MIG Device 1: GI 5 CI 0 (UUID: MIG-2)\n",
		},
		"product from the CDI variables": {
			in:   Inputs{Environ: []string{"GPUDRA_GPU_3=GPU-s3", "GPUDRA_GPU_3_PRODUCT=NVIDIA L4"}, DevNodes: append(control, "nvidia3")},
			want: "GPU 0: NVIDIA L4 (UUID: GPU-s3)\n",
		},
		"MIG devices like nvidia-smi -L: profile, parent and product from the CDI variables": {
			in: Inputs{Environ: []string{"GPUDRA_MIG_2_5_0=MIG-2", "GPUDRA_MIG_2_5_0_PROFILE=1g.10gb",
				"GPUDRA_MIG_2_3_0=MIG-1", "GPUDRA_MIG_2_3_0_PROFILE=3g.40gb", "GPUDRA_MIG_2_PARENT=GPU-a2",
				"GPUDRA_GPU_2_PRODUCT=NVIDIA A100-SXM4-40GB"},
				DevNodes: append(control, "nvidia2"), CapNodes: []string{"nvidia-cap1", "nvidia-cap2"}},
			want: "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-a2)\n" +
				"  MIG 3g.40gb     Device  0: (UUID: MIG-1)\n" +
				"  MIG 1g.10gb     Device  1: (UUID: MIG-2)\n",
		},
		"MIG without caps, parent UUID unknown": {
			in:       Inputs{Environ: []string{"GPUDRA_MIG_0_1_0=MIG-9"}, DevNodes: []string{"nvidia0"}},
			want:     "GPU 0: unknown product (UUID: unknown)\n  MIG Device 0: GI 1 CI 0 (UUID: MIG-9)\n",
			warnings: []string{"GPUDRA_MIG_0_1_0=MIG-9, but /dev/nvidia-caps has no capability nodes: that MIG device cannot be used"},
		},
		"inconsistencies are warnings": {
			in: Inputs{Environ: []string{"GPUDRA_GPU_1=GPU-other", "GPUDRA_GPU_7=GPU-gone",
				"GPUDRA_MIG_8_1_0=MIG-gone"}, DevNodes: []string{"nvidia1"}, CapNodes: []string{"nvidia-cap1"}, Proc: []ProcGPU{h100}},
			want: "GPU 0: unknown product (UUID: GPU-other)\n",
			warnings: []string{
				"GPUDRA_GPU_1=GPU-other, but the driver's /proc file of minor 1 says GPU-h1",
				"GPUDRA_GPU_7=GPU-gone, but /dev/nvidia7 is missing: that GPU cannot be used",
				"GPUDRA_MIG_8_1_0=MIG-gone, but its GPU's /dev/nvidia8 is missing: that MIG device cannot be used",
			},
		},
		"no GPU: only control nodes": {
			in:           Inputs{DevNodes: control},
			wantErr:      `no /dev/nvidia<N> device node (0 GPUDRA_GPU_* and 0 GPUDRA_MIG_* variables)`,
			wantNoGPUErr: true,
		},
		"no GPU: the variables alone are not enough": {
			in:           Inputs{Environ: []string{"GPUDRA_GPU_0=GPU-a"}, Proc: []ProcGPU{h100}},
			wantErr:      "(1 GPUDRA_GPU_* and 0 GPUDRA_MIG_*",
			wantNoGPUErr: true,
		},
		"NVIDIA_VISIBLE_DEVICES is not read": {
			in:   Inputs{Environ: []string{"NVIDIA_VISIBLE_DEVICES=gpu0", "GPUDRA_GPU_0=GPU-a"}, DevNodes: []string{"nvidia0"}},
			want: "GPU 0: unknown product (UUID: GPU-a)\n",
		},
	} {
		r, err := Discover(tc.in)
		if tc.wantErr != "" {
			if assert.Error(t, err, name) {
				assert.Contains(t, err.Error(), tc.wantErr, name)
				assert.Equal(t, tc.wantNoGPUErr, errors.Is(err, ErrNoGPU), name)
			}
			continue
		}
		require.NoError(t, err, name)
		var out strings.Builder
		require.NoError(t, Format(&out, r))
		assert.Equal(t, tc.want, out.String(), name)
		assert.ElementsMatch(t, tc.warnings, r.Warnings, name)
	}
}

func TestGPUMinors(t *testing.T) {
	assert.Equal(t, []int{0, 2, 10}, gpuMinors([]string{"nvidia10", "nvidiactl", "nvidia-uvm", "nvidia2", "nvidia0",
		"nvidia-caps", "nvidia", "nvidia2x", "nvidia-modeset", "nvidia0"}))
}

func TestReadInputs(t *testing.T) {
	dev, proc := t.TempDir(), t.TempDir()
	for _, n := range []string{"nvidia0", "nvidiactl", "null"} {
		require.NoError(t, os.WriteFile(filepath.Join(dev, n), nil, 0o666))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(dev, "nvidia-caps"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dev, "nvidia-caps", "nvidia-cap12"), nil, 0o444))
	gpuDir := filepath.Join(proc, "gpus", "0000:1b:00.0")
	require.NoError(t, os.MkdirAll(gpuDir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(gpuDir, "information"), []byte(info("NVIDIA L4", "GPU-l4", "0000:1b:00.0", "0")), 0o444))

	in, err := ReadInputs(Paths{Dev: dev, DriverProc: proc}, []string{"A=b"})
	require.NoError(t, err)
	assert.Equal(t, Inputs{Environ: []string{"A=b"}, DevNodes: []string{"nvidia0", "nvidiactl"}, CapNodes: []string{"nvidia-cap12"},
		Proc: []ProcGPU{{Model: "NVIDIA L4", UUID: "GPU-l4", BusID: "0000:1b:00.0", Minor: 0}}}, in)

	// No driver /proc and no caps directory: not errors. No /dev: an error.
	in, err = ReadInputs(Paths{Dev: proc, DriverProc: filepath.Join(proc, "absent")}, nil)
	require.NoError(t, err)
	assert.Empty(t, in.Proc)
	_, err = ReadInputs(Paths{Dev: filepath.Join(dev, "absent")}, nil)
	assert.Error(t, err)
}
