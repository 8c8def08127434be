package cdi

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/test/visiblegpus"
)

// TestContainerSeesEveryDevice: a container with devices of two requests
// of one claim (demo 09's mig-pair: two MIG devices of one GPU) and of a
// second claim sees all of them, and no NVIDIA_VISIBLE_DEVICES. Each device
// used to set that variable to its own request's GPUs, so the container
// got several values and the last one won: a runtime that reads it (the
// nvidia-container-runtime in legacy mode) injected one request's devices,
// a second time, and dropped the others.
func TestContainerSeesEveryDevice(t *testing.T) {
	w := newWriter(t)
	w.SetMIGCaps(SimulatedMIGCaps{})
	const other = "7a2d3f0b-6d1f-4d8f-8c1b-2e3f40516070"
	big := ClaimDevice{DeviceName: "gpu-3-mig-2", GPU: &gpus[1], RequestUUIDs: []string{"MIG-big"},
		MIG: &MIGInstance{UUID: "MIG-big", GIID: 2, CIID: 0, Profile: "3g.40gb"}}
	small := ClaimDevice{DeviceName: "gpu-3-mig-9", GPU: &gpus[1], RequestUUIDs: []string{"MIG-small"},
		MIG: &MIGInstance{UUID: "MIG-small", GIID: 9, CIID: 0, Profile: "1g.10gb"}, Env: []string{"GPUDRA_SHARING_STRATEGY=TimeSlicing"}}
	whole := ClaimDevice{DeviceName: "gpu-0", GPU: &gpus[0], RequestUUIDs: []string{gpus[0].UUID}}
	_, err := w.WriteClaim(uid, []ClaimDevice{big, small})
	require.NoError(t, err)
	_, err = w.WriteClaim(other, []ClaimDevice{whole})
	require.NoError(t, err)

	spec := inject(t, w.Dir(), DeviceID(uid, big.DeviceName), DeviceID(uid, small.DeviceName), DeviceID(other, whole.DeviceName))
	for _, kv := range spec.Process.Env {
		require.False(t, strings.HasPrefix(kv, "NVIDIA_VISIBLE_DEVICES="), "set for no GPU: %s", kv)
	}
	in := visiblegpus.Inputs{Environ: spec.Process.Env}
	for _, d := range spec.Linux.Devices {
		if strings.HasPrefix(d.Path, "/dev/nvidia-caps/") {
			in.CapNodes = append(in.CapNodes, filepath.Base(d.Path))
		} else {
			in.DevNodes = append(in.DevNodes, filepath.Base(d.Path))
		}
	}
	r, err := visiblegpus.Discover(in)
	require.NoError(t, err)
	require.Empty(t, r.Warnings)
	var out strings.Builder
	require.NoError(t, visiblegpus.Format(&out, r))
	require.Equal(t, "GPU 0: NVIDIA H100 80GB HBM3 (UUID: "+gpus[0].UUID+")\n"+
		"GPU 1: NVIDIA H100 80GB HBM3 (UUID: "+gpus[1].UUID+")\n"+
		"  MIG 3g.40gb     Device  0: (UUID: MIG-big)\n"+
		"  MIG 1g.10gb     Device  1: (UUID: MIG-small)\n", out.String())
}
