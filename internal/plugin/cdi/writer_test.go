package cdi

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/require"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/internal/plugin/model"
)

const uid = "6f1c2f0a-5c0e-4c7e-9b0a-1d2e3f405060"

var gpus = []model.GPU{
	{Index: 0, Minor: 0, UUID: "GPU-aaaaaaaa-0000-0000-0000-000000000000", ProductName: "NVIDIA H100 80GB HBM3"},
	{Index: 1, Minor: 3, UUID: "GPU-bbbbbbbb-0000-0000-0000-000000000000", ProductName: "NVIDIA H100 80GB HBM3"},
}

func newWriter(t *testing.T) *Writer {
	t.Helper()
	edits, err := NewCachedEdits(SimulatedEdits{}, gpus)
	require.NoError(t, err)
	w, err := NewWriter(t.TempDir(), edits)
	require.NoError(t, err)
	return w
}

// inject resolves CDI device IDs exactly as a CDI-enabled runtime does.
func inject(t *testing.T, dir string, ids ...string) *oci.Spec {
	t.Helper()
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	require.NoError(t, err)
	require.Empty(t, cache.GetErrors(), "the CDI cache must load our spec without errors")
	spec := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	unresolved, err := cache.InjectDevices(spec, ids...)
	require.NoError(t, err)
	require.Empty(t, unresolved)
	return spec
}

func TestWriteClaimIsValidCDI(t *testing.T) {
	tests := []struct {
		name        string
		devices     []ClaimDevice
		inject      []string
		wantNodes   []string
		wantEnv     []string
		wantMissing []string
	}{
		{
			name:      "one GPU",
			devices:   []ClaimDevice{{DeviceName: "gpu-0", GPU: &gpus[0], RequestUUIDs: []string{gpus[0].UUID}}},
			inject:    []string{DeviceID(uid, "gpu-0")},
			wantNodes: []string{"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"},
			wantEnv:   []string{"GPUDRA_GPU_0=" + gpus[0].UUID},
		},
		{
			name: "two GPUs, container gets both",
			devices: []ClaimDevice{
				{DeviceName: "gpu-0", GPU: &gpus[0], RequestUUIDs: []string{gpus[0].UUID, gpus[1].UUID}},
				{DeviceName: "gpu-3", GPU: &gpus[1], RequestUUIDs: []string{gpus[0].UUID, gpus[1].UUID}, Env: []string{"GPUDRA_SHARING_STRATEGY=TimeSlicing"}},
			},
			inject:    []string{DeviceID(uid, "gpu-0"), DeviceID(uid, "gpu-3")},
			wantNodes: []string{"/dev/nvidia0", "/dev/nvidia3", "/dev/nvidiactl"},
			wantEnv:   []string{"GPUDRA_GPU_0=" + gpus[0].UUID, "GPUDRA_GPU_3=" + gpus[1].UUID, "GPUDRA_SHARING_STRATEGY=TimeSlicing"},
		},
		{
			name: "two GPUs, container gets one",
			devices: []ClaimDevice{
				{DeviceName: "gpu-0", GPU: &gpus[0], RequestUUIDs: []string{gpus[0].UUID}},
				{DeviceName: "gpu-3", GPU: &gpus[1], RequestUUIDs: []string{gpus[1].UUID}},
			},
			inject:      []string{DeviceID(uid, "gpu-3")},
			wantNodes:   []string{"/dev/nvidia3", "/dev/nvidiactl"},
			wantEnv:     []string{"GPUDRA_GPU_3=" + gpus[1].UUID},
			wantMissing: []string{"/dev/nvidia0"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWriter(t)
			ids, err := w.WriteClaim(uid, tc.devices)
			require.NoError(t, err)
			for _, d := range tc.devices {
				require.Equal(t, "k8s.gpu.gpudra.io/claim="+uid+"-"+d.DeviceName, ids[d.DeviceName])
			}
			spec := inject(t, w.Dir(), tc.inject...)
			var nodes []string
			for _, n := range spec.Linux.Devices {
				nodes = append(nodes, n.Path)
			}
			for _, want := range tc.wantNodes {
				require.Contains(t, nodes, want)
			}
			for _, missing := range tc.wantMissing {
				require.NotContains(t, nodes, missing)
			}
			for _, want := range tc.wantEnv {
				require.Contains(t, spec.Process.Env, want)
			}
			for _, kv := range spec.Process.Env {
				require.False(t, strings.HasPrefix(kv, "NVIDIA_VISIBLE_DEVICES="),
					"NVIDIA_VISIBLE_DEVICES is set for no GPU (as by NVIDIA's driver): %s", kv)
			}
			// The runtime also gets cgroup access to every injected node.
			require.NotEmpty(t, spec.Linux.Resources.Devices)
		})
	}
}

func TestSpecFileNotWorldWritable(t *testing.T) {
	w := newWriter(t)
	_, err := w.WriteClaim(uid, []ClaimDevice{{DeviceName: "gpu-0", GPU: &gpus[0], RequestUUIDs: []string{gpus[0].UUID}}})
	require.NoError(t, err)
	fi, err := os.Stat(w.SpecPath(uid))
	require.NoError(t, err)
	require.Zero(t, fi.Mode().Perm()&0o022, "spec mode %v", fi.Mode())
}

func TestRemoveAndList(t *testing.T) {
	w := newWriter(t)
	other := "11111111-2222-3333-4444-555555555555"
	for _, u := range []string{uid, other} {
		_, err := w.WriteClaim(u, []ClaimDevice{{DeviceName: "gpu-0", GPU: &gpus[0]}})
		require.NoError(t, err)
	}
	// A foreign spec in the same directory is never touched.
	require.NoError(t, os.WriteFile(filepath.Join(w.Dir(), "vendor.com-foo.json"), []byte("{}"), 0o600))

	uids, err := w.ListClaims()
	require.NoError(t, err)
	require.Equal(t, []string{other, uid}, uids)

	require.NoError(t, w.RemoveClaim(uid))
	require.NoError(t, w.RemoveClaim(uid), "removing twice is fine")
	ok, err := w.HasClaim(uid)
	require.NoError(t, err)
	require.False(t, ok)
	uids, err = w.ListClaims()
	require.NoError(t, err)
	require.Equal(t, []string{other}, uids)
	_, err = os.Stat(filepath.Join(w.Dir(), "vendor.com-foo.json"))
	require.NoError(t, err)
}

func TestRejectsUnsafeUID(t *testing.T) {
	w := newWriter(t)
	for _, bad := range []string{"", "../../etc/x", "a/b", "a.b", strings.Repeat("a", 65)} {
		_, err := w.WriteClaim(bad, []ClaimDevice{{DeviceName: "gpu-0", GPU: &gpus[0]}})
		require.Error(t, err, "uid %q", bad)
		require.Error(t, w.RemoveClaim(bad), "uid %q", bad)
	}
	entries, err := os.ReadDir(w.Dir())
	require.NoError(t, err)
	require.Empty(t, entries)
}

func TestCachedEditsUnknownGPU(t *testing.T) {
	edits, err := NewCachedEdits(SimulatedEdits{}, gpus[:1])
	require.NoError(t, err)
	_, err = edits.Device(&gpus[1])
	require.ErrorContains(t, err, "not present when the plugin started")
	common, err := edits.Common()
	require.NoError(t, err)
	var paths []string
	for _, n := range common.DeviceNodes {
		paths = append(paths, n.Path)
	}
	require.True(t, slices.Contains(paths, "/dev/nvidiactl"))
}

// failingEdits fails for every GPU, as nvcdi does for a GPU NVML cannot reach.
type failingEdits struct{ SimulatedEdits }

func (failingEdits) Device(*model.GPU) (*cdispec.ContainerEdits, error) {
	return nil, errors.New("nvcdi: GPU is lost")
}

// A GPU published from its last known identity is not asked about; asking
// for its edits later says why it cannot be prepared.
func TestCachedEditsUnreachableGPU(t *testing.T) {
	lost := slices.Clone(gpus)
	lost[1].Unreachable = "gpu-is-lost"
	// gpus[0] answered discovery but fell off the bus before its edits: it
	// does not stop the plugin, it is listed as failed and never prepared.
	edits, err := NewCachedEdits(failingEdits{}, lost)
	require.NoError(t, err, "one GPU's edits never stop the plugin")
	require.Len(t, edits.Failed(), 1)
	require.ErrorContains(t, edits.Failed()[lost[0].UUID], "GPU is lost")
	_, err = edits.Device(&lost[0])
	require.ErrorContains(t, err, "GPU is lost")
	require.ErrorContains(t, err, "cannot be prepared until it is repaired")
	_, err = edits.Device(&lost[1])
	require.ErrorContains(t, err, "did not answer NVML when the plugin started")
}

// identityEnv gives the container what gpudra-gpus needs to print a device
// like nvidia-smi -L: the product, and for a MIG device its profile and
// parent GPU.
func TestIdentityEnv(t *testing.T) {
	noName := model.GPU{Minor: 5, UUID: "GPU-cc"}
	for _, tc := range []struct {
		name string
		d    ClaimDevice
		want []string
	}{
		{"whole GPU", ClaimDevice{GPU: &gpus[1]},
			[]string{"GPUDRA_GPU_3=" + gpus[1].UUID, "GPUDRA_GPU_3_PRODUCT=NVIDIA H100 80GB HBM3"}},
		{"MIG device", ClaimDevice{GPU: &gpus[1], MIG: &MIGInstance{UUID: "MIG-dd", GIID: 2, CIID: 0, Profile: "1g.10gb+me"}},
			[]string{"GPUDRA_MIG_3_2_0=MIG-dd", "GPUDRA_MIG_3_2_0_PROFILE=1g.10gb+me", "GPUDRA_MIG_3_PARENT=" + gpus[1].UUID,
				"GPUDRA_GPU_3_PRODUCT=NVIDIA H100 80GB HBM3"}},
		{"MIG device without profile, GPU without name", ClaimDevice{GPU: &noName, MIG: &MIGInstance{UUID: "MIG-ee", GIID: 1, CIID: 1}},
			[]string{"GPUDRA_MIG_5_1_1=MIG-ee", "GPUDRA_MIG_5_PARENT=GPU-cc"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, identityEnv(tc.d))
		})
	}
}

// TestSpecControlCharacters: strings from NVML with characters that the
// runtimes' CDI loader (a YAML parser) rejects are made printable in the
// identity variables, and an environment entry with one fails Spec instead
// of writing a spec the runtime cannot load, as does a device name CDI
// refuses (both found by FuzzSpec).
func TestSpecControlCharacters(t *testing.T) {
	odd := model.GPU{Minor: 3, UUID: "GPU-bbbbbbbb-0000-0000-0000-000000000000", ProductName: "NVIDIA\x7f H100\u0085"}
	tests := []struct {
		name    string
		device  ClaimDevice
		wantEnv []string
		wantErr string
	}{
		{name: "product and MIG profile with control characters",
			device: ClaimDevice{DeviceName: "gpu-3-mig-1g10gb-9", GPU: &odd,
				MIG: &MIGInstance{UUID: "MIG-dd", GIID: 9, CIID: 0, Profile: "1g.10gb\x7f"}},
			wantEnv: []string{"GPUDRA_GPU_3_PRODUCT=NVIDIA? H100?", "GPUDRA_MIG_3_9_0_PROFILE=1g.10gb?"}},
		{name: "extra environment with a control character",
			device:  ClaimDevice{DeviceName: "gpu-3", GPU: &gpus[1], Env: []string{"GPUDRA_X=a\u0085b"}},
			wantErr: `environment entry "GPUDRA_X=a\u0085b" of device gpu-3 has a control character`},
		{name: "device name CDI refuses", device: ClaimDevice{DeviceName: "gpu 3", GPU: &gpus[1]},
			wantErr: `device name "gpu 3": invalid character ' '`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			edits, err := NewCachedEdits(SimulatedEdits{}, []model.GPU{*tc.device.GPU})
			require.NoError(t, err)
			w, err := NewWriter(t.TempDir(), edits)
			require.NoError(t, err)
			w.SetMIGCaps(SimulatedMIGCaps{})
			ids, err := w.WriteClaim(uid, []ClaimDevice{tc.device})
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			spec := inject(t, w.Dir(), ids[tc.device.DeviceName])
			for _, e := range tc.wantEnv {
				require.Contains(t, spec.Process.Env, e)
			}
		})
	}
}
