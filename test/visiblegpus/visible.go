// Package visiblegpus works out which NVIDIA GPUs a container can see, from
// inside it, without NVML: the /dev/nvidia<N> device nodes it has, the
// variables the gpudra CDI specs set (GPUDRA_GPU_<minor>, GPUDRA_MIG_...)
// and, where the driver's /proc files are visible,
// the GPUs' product names. test/cmd/gpudra-gpus prints the result like
// `nvidia-smi -L` for the workload image of the local cluster.
package visiblegpus

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
)

// UnknownProduct is printed for a GPU whose product name is not visible in
// the container: the gpudra CDI specs do not pass it, and the driver's
// /proc/driver/nvidia/gpus files are only there on a real GPU node (or when
// a simulated driver root's copy is mounted and named with --proc).
const UnknownProduct = "unknown product"

// UnknownUUID is printed for a GPU whose device node is there but whose UUID
// no variable or /proc file gives (e.g. the parent GPU of a MIG device).
const UnknownUUID = "unknown"

// GPU is a GPU the container can use.
type GPU struct {
	// Index numbers the visible GPUs from 0 by minor, as nvidia-smi does.
	Index   int
	Minor   int
	UUID    string
	Product string
	MIG     []MIGDevice
}

// MIGDevice is a MIG device of a visible GPU.
type MIGDevice struct {
	// Index numbers the GPU's MIG devices from 0, by GPU and compute instance.
	Index  int
	GI, CI int
	UUID   string
	Minor  int // the parent GPU's
	// Profile such as "1g.10gb"; empty when no variable names it.
	Profile string
}

// Inputs is what the container shows.
type Inputs struct {
	// Environ is the environment as KEY=value pairs.
	Environ []string
	// DevNodes are the names of the nvidia* entries of /dev, e.g.
	// "nvidia0", "nvidiactl", "nvidia-uvm".
	DevNodes []string
	// CapNodes are the names in /dev/nvidia-caps (MIG capabilities).
	CapNodes []string
	// Proc are the driver's GPU descriptions, when visible.
	Proc []ProcGPU
}

// Result lists the visible GPUs and what did not add up.
type Result struct {
	GPUs []GPU
	Env  Env
	// Warnings describe inconsistencies, e.g. a variable naming a GPU
	// whose device node is missing.
	Warnings []string
}

// ErrNoGPU means the container has no GPU device node.
var ErrNoGPU = errors.New("no GPU visible in this container")

// Discover puts the inputs together. It fails with ErrNoGPU (wrapped, with
// what the container does show) when there is no /dev/nvidia<N> node: a
// GPU without its device node cannot be used, whatever variables say.
func Discover(in Inputs) (*Result, error) {
	env := ParseEnv(in.Environ)
	r := &Result{Env: env}
	minors := gpuMinors(in.DevNodes)
	procByMinor, procByUUID := map[int]ProcGPU{}, map[string]ProcGPU{}
	for _, p := range in.Proc {
		procByMinor[p.Minor] = p
		if p.UUID != "" {
			procByUUID[p.UUID] = p
		}
	}
	for i, minor := range minors {
		g := GPU{Index: i, Minor: minor, UUID: env.GPUs[minor], Product: UnknownProduct}
		if g.UUID == "" {
			g.UUID = env.Parents[minor]
		}
		if name := env.Products[minor]; name != "" {
			g.Product = name
		}
		p, ok := procByMinor[minor]
		switch {
		case g.UUID == "" && ok && p.UUID != "":
			g.UUID = p.UUID
		case g.UUID != "" && ok && p.UUID != "" && p.UUID != g.UUID:
			r.warn("GPUDRA_GPU_%d=%s, but the driver's /proc file of minor %d says %s", minor, g.UUID, minor, p.UUID)
		}
		if p, ok := procByUUID[g.UUID]; ok && p.Model != "" {
			g.Product = p.Model
		} else if p, ok := procByMinor[minor]; ok && p.Model != "" && g.UUID == "" {
			g.Product = p.Model
		}
		if g.UUID == "" {
			g.UUID = UnknownUUID
		}
		r.GPUs = append(r.GPUs, g)
	}
	byMinor := map[int]*GPU{}
	for i := range r.GPUs {
		byMinor[r.GPUs[i].Minor] = &r.GPUs[i]
	}
	for minor, uuid := range env.GPUs {
		if byMinor[minor] == nil {
			r.warn("GPUDRA_GPU_%d=%s, but /dev/nvidia%d is missing: that GPU cannot be used", minor, uuid, minor)
		}
	}
	r.addMIG(env.MIG, byMinor, len(in.CapNodes) > 0)
	if len(r.GPUs) == 0 {
		return r, fmt.Errorf("%w: no /dev/nvidia<N> device node (%d GPUDRA_GPU_* and %d GPUDRA_MIG_* variables)",
			ErrNoGPU, len(env.GPUs), len(env.MIG))
	}
	return r, nil
}

func (r *Result) warn(format string, args ...any) {
	r.Warnings = append(r.Warnings, fmt.Sprintf(format, args...))
}

// addMIG attaches the MIG devices of the variables to their parent GPUs.
func (r *Result) addMIG(migs []EnvMIG, byMinor map[int]*GPU, hasCaps bool) {
	sorted := append([]EnvMIG(nil), migs...)
	sort.Slice(sorted, func(i, j int) bool {
		a, b := sorted[i], sorted[j]
		if a.Minor != b.Minor {
			return a.Minor < b.Minor
		}
		if a.GI != b.GI {
			return a.GI < b.GI
		}
		return a.CI < b.CI
	})
	for _, m := range sorted {
		g := byMinor[m.Minor]
		if g == nil {
			r.warn("GPUDRA_MIG_%d_%d_%d=%s, but its GPU's /dev/nvidia%d is missing: that MIG device cannot be used", m.Minor, m.GI, m.CI, m.UUID, m.Minor)
			continue
		}
		if !hasCaps {
			r.warn("GPUDRA_MIG_%d_%d_%d=%s, but /dev/nvidia-caps has no capability nodes: that MIG device cannot be used", m.Minor, m.GI, m.CI, m.UUID)
		}
		g.MIG = append(g.MIG, MIGDevice{Index: len(g.MIG), GI: m.GI, CI: m.CI, UUID: m.UUID, Minor: m.Minor, Profile: m.Profile})
	}
}

// gpuMinors returns the N of the nvidia<N> names, sorted.
func gpuMinors(names []string) []int {
	var minors []int
	seen := map[int]bool{}
	for _, n := range names {
		digits, ok := strings.CutPrefix(n, "nvidia")
		if !ok || digits == "" || strings.Trim(digits, "0123456789") != "" {
			continue
		}
		if m := atoi(digits); m >= 0 && !seen[m] {
			seen[m] = true
			minors = append(minors, m)
		}
	}
	sort.Ints(minors)
	return minors
}

// Format writes the GPUs like `nvidia-smi -L`:
//
//	GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)
//	  MIG 1g.10gb     Device  0: (UUID: MIG-...)
//
// A MIG device whose profile no variable names (a spec written by an older
// plugin) is written with its GPU and compute instance instead:
// "  MIG Device 0: GI 1 CI 0 (UUID: MIG-...)".
func Format(w io.Writer, r *Result) error {
	var b strings.Builder
	for _, g := range r.GPUs {
		fmt.Fprintf(&b, "GPU %d: %s (UUID: %s)\n", g.Index, g.Product, g.UUID)
		for _, m := range g.MIG {
			if m.Profile != "" {
				fmt.Fprintf(&b, "  MIG %-12sDevice %2d: (UUID: %s)\n", m.Profile, m.Index, m.UUID)
				continue
			}
			fmt.Fprintf(&b, "  MIG Device %d: GI %d CI %d (UUID: %s)\n", m.Index, m.GI, m.CI, m.UUID)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
