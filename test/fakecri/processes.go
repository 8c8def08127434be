package fakecri

import (
	"context"
	"slices"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/pkg/nvmllib/sim"
)

// Simulated GPU load: with Options.ProcessDir (a simulated driver root's
// process directory, fakedriver.ProcessDir) every running container that
// got GPUs is a compute process of the simulated NVML (sim.Process), from
// StartContainer until StopContainer or RemoveContainer, so that the
// simulated GPUs are busy exactly while a container uses them.

// gpuUUIDs are the UUIDs of the GPUs and MIG devices a container got: the
// values of the GPUDRA_GPU_<minor> and GPUDRA_MIG_<minor>_<gi>_<ci>
// variables its CDI devices set, one per device.
func (i Injection) gpuUUIDs() []string {
	var out []string
	for _, kv := range i.Env {
		k, v, ok := strings.Cut(kv, "=")
		if ok && v != "" && (strings.HasPrefix(k, "GPUDRA_GPU_") || strings.HasPrefix(k, "GPUDRA_MIG_")) {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// startProcess records the container as a process on its GPUs.
func (r *Runtime) startProcess(ctx context.Context, inj Injection) {
	uuids := inj.gpuUUIDs()
	if r.processDir == "" || len(uuids) == 0 {
		return
	}
	p := sim.Process{Name: inj.Pod + "/" + inj.Container, Devices: uuids}
	if err := sim.WriteProcess(r.processDir, inj.ContainerID, p); err != nil {
		klog.FromContext(ctx).Error(err, "Recording the container as a simulated GPU process failed", "containerID", inj.ContainerID)
	}
}

// stopProcess ends the container's process, if it had one.
func (r *Runtime) stopProcess(ctx context.Context, containerID string) {
	if r.processDir == "" {
		return
	}
	if err := sim.RemoveProcess(r.processDir, containerID); err != nil {
		klog.FromContext(ctx).Error(err, "Removing the simulated GPU process of a container failed", "containerID", containerID)
	}
}

// clearProcesses removes the records of an earlier run: a new runtime has
// no containers.
func (r *Runtime) clearProcesses(ctx context.Context) {
	if r.processDir == "" {
		return
	}
	procs, err := sim.ReadProcesses(r.processDir)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Listing simulated GPU processes failed", "dir", r.processDir)
		return
	}
	for id := range procs {
		r.stopProcess(ctx, id)
	}
}

// StopContainer ends the container's simulated GPU process, then stops it.
func (r *Runtime) StopContainer(ctx context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	r.stopProcess(ctx, req.ContainerId)
	return r.RemoteRuntime.StopContainer(ctx, req)
}
