package visiblegpus

import (
	"bufio"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Env is what the gpudra CDI specs put into a container's environment
// (internal/plugin/cdi): GPUDRA_GPU_<minor>=<uuid> for a whole GPU,
// GPUDRA_MIG_<minor>_<gi>_<ci>=<uuid> (and ..._PROFILE=<profile>) for a MIG
// device of the GPU with that minor, GPUDRA_MIG_<minor>_PARENT=<uuid> for
// that GPU, GPUDRA_GPU_<minor>_PRODUCT=<product name>, plus the sharing
// variables.
type Env struct {
	// GPUs maps a GPU's minor to its UUID.
	GPUs map[int]string
	// Parents maps the minor of a GPU whose MIG devices the container has
	// to the GPU's UUID.
	Parents map[int]string
	// Products maps a GPU's minor to its product name.
	Products map[int]string
	// MIG lists the MIG devices.
	MIG []EnvMIG
	// Sharing holds GPUDRA_SHARING_STRATEGY and GPUDRA_TIMESLICE_INTERVAL
	// and the CUDA_MPS_* variables, as KEY=value.
	Sharing []string
}

// EnvMIG is one GPUDRA_MIG_<minor>_<gi>_<ci> variable.
type EnvMIG struct {
	Minor, GI, CI int
	UUID          string
	// Profile from GPUDRA_MIG_<minor>_<gi>_<ci>_PROFILE; empty when unset.
	Profile string
}

var (
	gpuEnvRE     = regexp.MustCompile(`^GPUDRA_GPU_([0-9]+)$`)
	productEnvRE = regexp.MustCompile(`^GPUDRA_GPU_([0-9]+)_PRODUCT$`)
	parentEnvRE  = regexp.MustCompile(`^GPUDRA_MIG_([0-9]+)_PARENT$`)
	migEnvRE     = regexp.MustCompile(`^GPUDRA_MIG_([0-9]+)_([0-9]+)_([0-9]+)$`)
	profileEnvRE = regexp.MustCompile(`^GPUDRA_MIG_([0-9]+)_([0-9]+)_([0-9]+)_PROFILE$`)
)

// ParseEnv reads the gpudra variables from KEY=value pairs (os.Environ()).
// Other variables are ignored; a gpudra variable with an empty value is too.
func ParseEnv(environ []string) Env {
	e := Env{GPUs: map[int]string{}, Parents: map[int]string{}, Products: map[int]string{}}
	profiles := map[[3]int]string{}
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		if strings.HasPrefix(k, "CUDA_MPS_") || k == "GPUDRA_SHARING_STRATEGY" || k == "GPUDRA_TIMESLICE_INTERVAL" {
			e.Sharing = append(e.Sharing, kv)
			continue
		}
		if v == "" {
			continue
		}
		if m := gpuEnvRE.FindStringSubmatch(k); m != nil {
			e.GPUs[atoi(m[1])] = v
		} else if m := migEnvRE.FindStringSubmatch(k); m != nil {
			e.MIG = append(e.MIG, EnvMIG{Minor: atoi(m[1]), GI: atoi(m[2]), CI: atoi(m[3]), UUID: v})
		} else if m := productEnvRE.FindStringSubmatch(k); m != nil {
			e.Products[atoi(m[1])] = v
		} else if m := parentEnvRE.FindStringSubmatch(k); m != nil {
			e.Parents[atoi(m[1])] = v
		} else if m := profileEnvRE.FindStringSubmatch(k); m != nil {
			profiles[[3]int{atoi(m[1]), atoi(m[2]), atoi(m[3])}] = v
		}
	}
	for i := range e.MIG {
		e.MIG[i].Profile = profiles[[3]int{e.MIG[i].Minor, e.MIG[i].GI, e.MIG[i].CI}]
	}
	return e
}

// atoi parses digits a regular expression matched; an overflow gives -1.
func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}

// ProcGPU is a GPU as the NVIDIA driver describes it in
// /proc/driver/nvidia/gpus/<bus id>/information.
type ProcGPU struct {
	Model, UUID, BusID string
	// Minor is the GPU's device minor (/dev/nvidia<Minor>).
	Minor int
}

// ParseProcInformation parses one information file ("Key: \t value" lines).
func ParseProcInformation(data string) (ProcGPU, error) {
	g := ProcGPU{Minor: -1}
	sc := bufio.NewScanner(strings.NewReader(data))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch strings.TrimSpace(k) {
		case "Model":
			g.Model = v
		case "GPU UUID":
			g.UUID = v
		case "Bus Location":
			g.BusID = v
		case "Device Minor":
			n, err := strconv.Atoi(v)
			if err != nil {
				return g, fmt.Errorf("device minor %q: %w", v, err)
			}
			g.Minor = n
		}
	}
	if err := sc.Err(); err != nil {
		return g, err
	}
	if g.Minor < 0 {
		return g, fmt.Errorf("no Device Minor line")
	}
	return g, nil
}
