package discovery

import (
	"context"
	"errors"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/mig"
	"github.com/gpudra/gpudra/internal/plugin/model"
)

// describeMIG reads the MIG geometry of a MIG-capable GPU and, in MIG
// mode, its MIG devices.
//
// A GPU not in MIG mode whose geometry cannot be read (no usable GPU
// instance profile, or no memory size to name the profiles by: a
// unified-memory GPU) is published as a whole GPU without MIG: it is
// usable as one, and withholding it would cost more than the MIG
// profiles it cannot offer. A GPU in MIG mode has no whole-GPU use, so
// the error stands; so does a GPU that stopped answering.
func describeMIG(ctx context.Context, dev nvml.Device, gpu *model.GPU) error {
	var geo *model.MIGGeometry
	err := errNoMemorySize
	if gpu.MemoryBytes > 0 {
		geo, err = mig.Geometry(dev, gpu.MemoryBytes)
	}
	if err != nil {
		if gpu.MIGEnabled || lost(err) {
			return err
		}
		klog.FromContext(ctx).Info("MIG-capable GPU's MIG geometry is unknown; publishing it as a whole GPU without MIG",
			"uuid", gpu.UUID, "err", err)
		gpu.MIGCapable = false
		return nil
	}
	gpu.MIG = geo
	if gpu.MIGEnabled {
		if gpu.MIGDevices, err = mig.Devices(dev, geo); err != nil {
			return err
		}
	}
	return nil
}

var errNoMemorySize = errors.New("NVML reports no memory size (unified memory), needed to name the MIG profiles")

// lost tells whether err says the GPU, or the library, stopped answering.
func lost(err error) bool {
	return libraryFailure(err) || errors.Is(err, nvml.ERROR_GPU_IS_LOST) || errors.Is(err, nvml.ERROR_RESET_REQUIRED)
}
