// Package fakegpu implements stand-ins for the NVIDIA command-line tools the
// kubelet plugin runs (nvidia-smi, nvidia-cuda-mps-control), for simulated
// nodes: they accept the same arguments and record what a real driver would
// have been told, in files tests can read. See test/cmd/gpudra-fake-*.
package fakegpu

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/gpudra/gpudra/internal/plugin/sharing"
)

// StateDirEnv names the directory where the fake nvidia-smi records the
// settings it was given (<dir>/timeslice/<uuid>); the plugin sets it. Without
// it the tools use the state directory of the fake driver root they are
// installed in (see StateDir).
const StateDirEnv = sharing.SimulatedStateDirEnv

var uuidRE = regexp.MustCompile(`^(GPU|MIG)-[0-9a-fA-F-]{8,}$`)

// TimeSlicePath is where the fake nvidia-smi records a GPU's time slice.
func TimeSlicePath(stateDir, uuid string) string {
	return filepath.Join(stateDir, "timeslice", uuid)
}

// NvidiaSMI runs the fake nvidia-smi with args (without the program name)
// and returns the exit code. It understands
//
//	compute-policy -i <uuid> --set-timeslice=<0..3>
//	compute-policy -i <uuid> --get-timeslice
//
// and records the level in TimeSlicePath(StateDir(), uuid), and the MIG
// commands of nvidiasmi_mig.go.
func NvidiaSMI(args []string, stdout, stderr io.Writer) int {
	if isMIGCommand(args) {
		return migSMI(args, stdout, stderr)
	}
	if len(args) == 1 && (args[0] == "-L" || args[0] == "--list-gpus") {
		return listGPUs(stdout, stderr)
	}
	stateDir, err := StateDir()
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "fake nvidia-smi: %v\n", err)
		return 2
	}
	if len(args) == 0 || args[0] != "compute-policy" {
		_, _ = fmt.Fprintf(stderr, "fake nvidia-smi: only -L, 'compute-policy' and the MIG commands (-mig, mig -cgi/-dci/-dgi) are simulated, got %q\n", strings.Join(args, " "))
		return 2
	}
	var uuid, set string
	get := false
	for i := 1; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-i" && i+1 < len(args):
			uuid = args[i+1]
			i++
		case strings.HasPrefix(a, "--set-timeslice="):
			set = strings.TrimPrefix(a, "--set-timeslice=")
		case a == "--get-timeslice":
			get = true
		default:
			_, _ = fmt.Fprintf(stderr, "Invalid combination of input arguments: %q\n", a)
			return 2
		}
	}
	if !uuidRE.MatchString(uuid) {
		_, _ = fmt.Fprintf(stderr, "No devices were found matching %q\n", uuid)
		return 6
	}
	if lostInFaultFile(stateDir, uuid) {
		// What the real tool says for a GPU that fell off the bus.
		_, _ = fmt.Fprintf(stderr, "Unable to determine the device handle for GPU %s: GPU is lost. Reboot the system to recover this GPU\n", uuid)
		return 15
	}
	path := TimeSlicePath(stateDir, uuid)
	if get {
		b, err := os.ReadFile(path)
		level := "0"
		if err == nil {
			level = strings.TrimSpace(string(b))
		}
		_, _ = fmt.Fprintf(stdout, "GPU %s: timeslice %s\n", uuid, level)
		return 0
	}
	level, err := strconv.Atoi(set)
	if err != nil || level < 0 || level > 3 {
		_, _ = fmt.Fprintf(stderr, "Invalid timeslice value %q: must be 0 (default), 1 (short), 2 (medium) or 3 (long)\n", set)
		return 2
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		_, _ = fmt.Fprintln(stderr, err)
		return 1
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(level)+"\n"), 0o644); err != nil {
		_, _ = fmt.Fprintln(stderr, err)
		return 1
	}
	_, _ = fmt.Fprintf(stdout, "Set timeslice to %d for GPU %s\n", level, uuid)
	return 0
}

// FaultFileName is the simulated node's fault file in the state directory
// (test/sim's FaultFile, test/fakedriver.FaultFile).
const FaultFileName = "faults"

// lostInFaultFile reports whether the node's fault file names the GPU by its
// UUID as lost ("<uuid> lost" or "<uuid> xid 79"): the simulated NVML then
// answers nothing about it, and neither does this tool. A GPU named by its
// device name (gpu-<index>) is not recognised here: the tool only knows
// UUIDs.
func lostInFaultFile(stateDir, uuid string) bool {
	b, err := os.ReadFile(filepath.Join(stateDir, FaultFileName))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		line, _, _ = strings.Cut(line, "#")
		f := strings.Fields(line)
		if len(f) >= 2 && strings.EqualFold(f[0], uuid) && (f[1] == "lost" || len(f) == 3 && f[1] == "xid" && f[2] == "79") {
			return true
		}
	}
	return false
}
