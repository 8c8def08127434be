package gpuverify

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/internal/plugin/cdi"
	"github.com/gpudra/gpudra/internal/plugin/model"
)

// checkSpec is step 3 for one prepared claim: the spec file the prepare
// wrote names only host paths that exist, describes every GPU of the claim,
// and the CDI library (as a container runtime uses it) loads it and injects
// the returned CDI devices into an OCI spec.
func (k *kit) checkSpec(s *Section, p *preparer, res *ClaimResult) {
	what := "claim " + res.Name
	path := p.writer.SpecPath(res.UID)
	spec, err := readSpec(path)
	if !s.check(err, what+": read the CDI spec "+path) {
		return
	}
	res.Spec = spec
	s.info("%s: %d device(s); common edits: %s", what, len(spec.Devices), describeEdits(&spec.ContainerEdits))
	paths := hostPaths(spec)
	for _, hp := range paths {
		res.HostPaths = append(res.HostPaths, hp.path)
	}
	if problems := checkHostPaths(paths); len(problems) > 0 {
		s.fail("%s: host paths of the spec:\n%s", what, strings.Join(problems, "\n"))
	} else {
		s.pass("%s: all %d host paths of the spec exist (device nodes, mounts, hooks)", what, len(paths))
	}
	gpus := gpusOf(p.node, res.Devices)
	s.check(checkSpecDevices(spec, res.UID, gpus), what+": every GPU has its CDI device, device node and environment")
	s.check(injectSpec(p.writer.Dir(), res.CDIDeviceIDs, spec, gpus), what+": the CDI library loads the spec and injects its devices into an OCI spec")
}

func readSpec(path string) (*cdispec.Spec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var spec cdispec.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	return &spec, nil
}

// hostPath is a host path a spec names and what it must be.
type hostPath struct {
	path string
	kind string // "device node", "mount", "hook"
	// devType is the device node's declared type ("c", "b" or empty).
	devType string
}

// hostPaths lists the distinct host paths of the spec's common and device
// edits, sorted.
func hostPaths(spec *cdispec.Spec) []hostPath {
	seen := map[string]hostPath{}
	add := func(e *cdispec.ContainerEdits) {
		for _, p := range cdi.HostPaths(e) {
			hp := hostPath{path: p.Path, kind: p.Kind}
			if p.Node != nil {
				hp.devType = p.Node.Type
			}
			seen[p.Path] = hp
		}
	}
	add(&spec.ContainerEdits)
	for i := range spec.Devices {
		add(&spec.Devices[i].ContainerEdits)
	}
	out := make([]hostPath, 0, len(seen))
	for _, hp := range seen {
		out = append(out, hp)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out
}

// checkHostPaths checks that each path exists (following links) and is a
// device node, resp. an executable, where the spec needs one.
func checkHostPaths(paths []hostPath) []string {
	var problems []string
	for _, hp := range paths {
		fi, err := os.Stat(hp.path)
		if err != nil {
			problems = append(problems, fmt.Sprintf("- %s %s: %v", hp.kind, hp.path, err))
			continue
		}
		mode := fi.Mode()
		switch {
		case hp.kind == "device node" && mode&fs.ModeDevice == 0:
			problems = append(problems, fmt.Sprintf("- device node %s is not a device file (mode %s)", hp.path, mode))
		case hp.kind == "device node" && hp.devType == "c" && mode&fs.ModeCharDevice == 0:
			problems = append(problems, fmt.Sprintf("- device node %s is declared a character device but is not one (mode %s)", hp.path, mode))
		case hp.kind == "hook" && (!mode.IsRegular() || mode.Perm()&0o111 == 0):
			problems = append(problems, fmt.Sprintf("- hook %s is not an executable file (mode %s)", hp.path, mode))
		case hp.kind == "hook":
			if err := startsOnHost(hp.path); err != nil {
				problems = append(problems, fmt.Sprintf("- hook %s does not start on this host: %v", hp.path, err))
			}
		}
	}
	return problems
}

// startsOnHost runs a hook with --version (which changes nothing), as the
// runtime would start it on this host: a hook linked against another C
// library than the host's fails here.
func startsOnHost(hook string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, hook, "--version").CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s --version: %w: %s", hook, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func gpusOf(node *model.Node, names []string) []*model.GPU {
	var out []*model.GPU
	for i := range node.GPUs {
		if slices.Contains(names, node.GPUs[i].DeviceName()) {
			out = append(out, &node.GPUs[i])
		}
	}
	return out
}

// checkSpecDevices checks what gpudra's spec promises per GPU (docs/reliability.md:
// CDI): a device "<claimUID>-gpu-<minor>" with /dev/nvidia<minor> and
// GPUDRA_GPU_<minor>=<uuid>.
func checkSpecDevices(spec *cdispec.Spec, uid string, gpus []*model.GPU) error {
	var problems []string
	for _, g := range gpus {
		name := uid + "-" + g.DeviceName()
		i := slices.IndexFunc(spec.Devices, func(d cdispec.Device) bool { return d.Name == name })
		if i < 0 {
			problems = append(problems, "no CDI device "+name)
			continue
		}
		e := spec.Devices[i].ContainerEdits
		node := "/dev/nvidia" + strconv.Itoa(g.Minor)
		if !slices.ContainsFunc(e.DeviceNodes, func(d *cdispec.DeviceNode) bool { return d.Path == node }) {
			problems = append(problems, fmt.Sprintf("%s: no device node %s", name, node))
		}
		if env := "GPUDRA_GPU_" + strconv.Itoa(g.Minor) + "=" + g.UUID; !slices.Contains(e.Env, env) {
			problems = append(problems, fmt.Sprintf("%s: no %s", name, env))
		}
	}
	if len(spec.Devices) != len(gpus) {
		problems = append(problems, fmt.Sprintf("%d CDI devices for %d GPUs", len(spec.Devices), len(gpus)))
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return nil
}

// injectSpec loads dir with the CDI library, as a container runtime does,
// and injects ids into an empty container's OCI spec.
func injectSpec(dir string, ids []string, spec *cdispec.Spec, gpus []*model.GPU) error {
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		return fmt.Errorf("load %s: %w", dir, err)
	}
	if errs := cache.GetErrors(); len(errs) > 0 {
		return fmt.Errorf("the CDI library reports errors: %v", errs)
	}
	ociSpec := &oci.Spec{Version: oci.Version, Process: &oci.Process{}, Linux: &oci.Linux{}}
	if unresolved, err := cache.InjectDevices(ociSpec, ids...); err != nil {
		return fmt.Errorf("inject %v (unresolved: %v): %w", ids, unresolved, err)
	}
	var problems []string
	want := []string{}
	for _, g := range gpus {
		want = append(want, "/dev/nvidia"+strconv.Itoa(g.Minor))
	}
	for _, d := range spec.ContainerEdits.DeviceNodes {
		want = append(want, d.Path)
	}
	for _, p := range want {
		if !slices.ContainsFunc(ociSpec.Linux.Devices, func(d oci.LinuxDevice) bool { return d.Path == p }) {
			problems = append(problems, "no device "+p+" in the OCI spec")
		}
	}
	// Every GPU named, and none selected through NVIDIA_VISIBLE_DEVICES:
	// the nvidia-container-runtime in legacy mode would inject the GPUs a
	// second time (only "void", which selects nothing, is harmless).
	for _, g := range gpus {
		if env := "GPUDRA_GPU_" + strconv.Itoa(g.Minor) + "=" + g.UUID; !slices.Contains(ociSpec.Process.Env, env) {
			problems = append(problems, "the container gets no "+env)
		}
	}
	if got := envValues(ociSpec.Process.Env, "NVIDIA_VISIBLE_DEVICES"); slices.ContainsFunc(got, func(v string) bool { return v != "void" }) {
		problems = append(problems, fmt.Sprintf("the container gets NVIDIA_VISIBLE_DEVICES %q: a runtime in legacy mode would inject GPUs again", got))
	}
	if n := countMounts(spec); len(ociSpec.Mounts) < n {
		problems = append(problems, fmt.Sprintf("%d mounts in the OCI spec, the CDI spec has %d", len(ociSpec.Mounts), n))
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return nil
}

// envValues returns the values of every entry of name in env.
func envValues(env []string, name string) []string {
	var out []string
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, name+"="); ok {
			out = append(out, v)
		}
	}
	return out
}

func countMounts(spec *cdispec.Spec) int {
	seen := map[string]bool{}
	for _, m := range spec.ContainerEdits.Mounts {
		seen[m.ContainerPath] = true
	}
	for _, d := range spec.Devices {
		for _, m := range d.ContainerEdits.Mounts {
			seen[m.ContainerPath] = true
		}
	}
	return len(seen)
}

// describeEdits summarizes container edits in one line.
func describeEdits(e *cdispec.ContainerEdits) string {
	var nodes []string
	for _, d := range e.DeviceNodes {
		nodes = append(nodes, d.Path)
	}
	return fmt.Sprintf("%d device node(s) [%s], %d mount(s), %d hook(s), %d env", len(e.DeviceNodes), strings.Join(nodes, " "),
		len(e.Mounts), len(e.Hooks), len(e.Env))
}
