// Package sharing applies the ways a GPU is shared between processes, claims
// and containers: the compute time slice (TimeSlicing), CUDA MPS control
// daemons (MPS) and the limits that enforce consumable-capacity shares.
//
// Everything here is keyed by the device's UUID (whole GPUs today, MIG
// devices later) or the claim's UID, never by a global lock: internal/plugin/prepare
// calls it with the devices' locks held.
package sharing

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/api/v1alpha1"
)

// TimeSlicer sets the compute time slice of a GPU.
type TimeSlicer interface {
	SetTimeSlice(ctx context.Context, uuid string, interval v1alpha1.TimeSliceInterval) error
}

// NvidiaSMI sets the time slice with `nvidia-smi compute-policy`.
//
// NVML has no API for the compute time slice of a bare-metal GPU: go-nvml
// v0.13 only offers the vGPU scheduler (nvmlDeviceSetVgpuSchedulerState),
// which does not apply to GPUs used directly by containers. nvidia-smi's
// compute-policy command is the only interface the driver offers, so this is
// the one place where the plugin shells out. In simulation Path names a fake
// nvidia-smi (test/cmd/gpudra-fake-nvidia-smi) that records the setting, so
// the same code runs in tests.
type NvidiaSMI struct {
	// Path of the nvidia-smi binary.
	Path string
	// Timeout bounds one invocation (default 30s).
	Timeout time.Duration
	// Env is added to the environment of nvidia-smi.
	Env []string
}

// SimulatedStateDirEnv tells the fake nvidia-smi of simulated nodes
// (test/cmd/gpudra-fake-nvidia-smi) where to record the settings it gets.
const SimulatedStateDirEnv = "GPUDRA_FAKE_GPU_STATE_DIR"

// ErrNoTool marks a missing helper binary (nvidia-smi, MPS control).
var ErrNoTool = errors.New("helper binary not available")

// SetTimeSlice implements TimeSlicer: level 0 (Default) to 3 (Long).
func (n NvidiaSMI) SetTimeSlice(ctx context.Context, uuid string, interval v1alpha1.TimeSliceInterval) error {
	level := interval.Int()
	if level < 0 {
		return fmt.Errorf("set time slice of GPU %s: unknown interval %q", uuid, interval)
	}
	if n.Path == "" {
		return fmt.Errorf("set time slice of GPU %s: %w: no nvidia-smi configured (--nvidia-smi-path)", uuid, ErrNoTool)
	}
	timeout := n.Timeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	args := []string{"compute-policy", "-i", uuid, "--set-timeslice=" + strconv.Itoa(level)}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, n.Path, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if len(n.Env) > 0 {
		cmd.Env = append(os.Environ(), n.Env...)
	}
	err := cmd.Run()
	if err != nil && cmd.ProcessState == nil && ctx.Err() == nil {
		// It never started: missing, not executable, ...
		return fmt.Errorf("set time slice of GPU %s: %w: %s cannot be run (%w); set --nvidia-smi-path to the driver's nvidia-smi",
			uuid, ErrNoTool, n.Path, err)
	}
	if err != nil {
		return fmt.Errorf("set time slice of GPU %s to %s: %s %s: %w: %s",
			uuid, interval, n.Path, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	klog.FromContext(ctx).V(3).Info("Set compute time slice", "uuid", uuid, "interval", interval, "level", level)
	return nil
}
