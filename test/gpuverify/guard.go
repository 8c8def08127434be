package gpuverify

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/plugin/model"
)

// How the kit stays read-only on GPU settings, in code:
//   - the prepare.Manager gets no MIG manager and no MPS control, and a time
//     slicer that refuses (and counts the attempt, which fails the run);
//   - the Manager's node holds only the GPUs published whole (MIG applied as
//     --mig=static, so never dynamic MIG): internal/plugin/prepare.New refuses a node
//     that publishes MIG devices without a MIG manager, and a whole GPU that
//     is not dynamically partitioned never reaches MIG code;
//   - every claim passes guardClaim before it is prepared: whole GPUs of
//     that node only, no configuration (so no sharing), no admin access, no
//     shares;
//   - nothing else in the kit calls an NVML function that changes state
//     (discovery, nvcdi, the health monitor only read; the fidelity table's
//     check makes only test/fidelity's calls, every one a Get or Query:
//     TestCallsOnlyRead).

// errReadOnly marks a refused change of a GPU setting.
var errReadOnly = errors.New("gpudra-gpu-verify is read-only on GPU settings")

// refusingSlicer is the Manager's sharing.TimeSlicer: it never sets a time
// slice and counts every attempt.
type refusingSlicer struct{ attempts atomic.Int64 }

func (r *refusingSlicer) SetTimeSlice(_ context.Context, uuid string, interval v1alpha1.TimeSliceInterval) error {
	r.attempts.Add(1)
	return fmt.Errorf("%w: refusing to set the time slice of %s to %s", errReadOnly, uuid, interval)
}

// wholeGPUNode is the node the Manager sees: the GPUs published whole only.
func wholeGPUNode(node *model.Node) *model.Node {
	out := &model.Node{DriverVersion: node.DriverVersion, CUDADriverVersion: node.CUDADriverVersion}
	for _, g := range node.GPUs {
		if g.Partitioning == model.WholeGPU {
			out.GPUs = append(out.GPUs, g)
		}
	}
	return out
}

// guardClaim refuses a claim the kit must not prepare: anything but an
// exclusive allocation of whole GPUs of node in pool, without configuration.
func guardClaim(c *resourceapi.ResourceClaim, driver, pool string, node *model.Node) error {
	a := c.Status.Allocation
	if a == nil || len(a.Devices.Results) == 0 {
		return fmt.Errorf("%w: claim %s has no allocated device", errReadOnly, c.Name)
	}
	if len(a.Devices.Config) > 0 || len(c.Spec.Devices.Config) > 0 {
		return fmt.Errorf("%w: claim %s carries a device configuration (sharing)", errReadOnly, c.Name)
	}
	whole := map[string]bool{}
	for _, g := range node.GPUs {
		whole[g.DeviceName()] = g.Partitioning == model.WholeGPU
	}
	for _, r := range a.Devices.Results {
		switch {
		case r.Driver != driver || r.Pool != pool:
			return fmt.Errorf("%w: claim %s: device %s of driver %s, pool %s is not this node's", errReadOnly, c.Name, r.Device, r.Driver, r.Pool)
		case !whole[r.Device]:
			return fmt.Errorf("%w: claim %s: %s is not a GPU published whole", errReadOnly, c.Name, r.Device)
		case r.AdminAccess != nil && *r.AdminAccess, r.ShareID != nil, len(r.ConsumedCapacity) > 0:
			return fmt.Errorf("%w: claim %s: %s is not allocated exclusively", errReadOnly, c.Name, r.Device)
		}
	}
	return nil
}
