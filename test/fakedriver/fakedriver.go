// Package fakedriver generates fake NVIDIA driver roots for simulated nodes:
// a directory laid out like a driver installation (libraries, binaries,
// device nodes, /proc and /sys files) whose libnvidia-ml is the simulated
// library of test/nvmlsim/lib. A kubelet plugin started with
// --nvidia-driver-root=<root> then runs its real code path (go-nvml dlopen,
// NVIDIA's nvcdi discovery, /proc and /sys reads) without a GPU. See README.md.
package fakedriver

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/gpudra/gpudra/internal/shared/atomicfile"
	"github.com/gpudra/gpudra/test/fakegpu"
	"github.com/gpudra/gpudra/test/sim"
)

// Paths relative to the root.
const (
	ConfigFile  = "etc/gpudra-sim/config.json"
	ProfilesDir = "etc/gpudra-sim/profiles"
	StateDir    = fakegpu.RootStateDir
	StateFile   = StateDir + "/nvml-state.json"
	FaultFile   = StateDir + "/" + fakegpu.FaultFileName
	// ProcessDir holds the simulated compute processes (sim.Process): the
	// fake root's nvidia-cdi-hook writes one per container with GPUs.
	ProcessDir = StateDir + "/processes"
	// LibDir and BinDir are the host layout's (Layouts).
	LibDir = "usr/lib/x86_64-linux-gnu"
	BinDir = "usr/bin"
)

// Layout is where a driver installation keeps its libraries and tools,
// relative to its root.
type Layout struct {
	Name   string
	LibDir string
	BinDir string
	// ForeignLibc: the library directory also holds the host's own C
	// library (ForeignLibc), as on Debian, Ubuntu and RHEL.
	ForeignLibc bool
	// Shell: the root is a whole system's, with a shell (bin/sh) and its
	// own C library and loader, so programs run chrooted into it, as
	// NVIDIA runs the MPS control daemon where the root has a shell.
	Shell bool
}

// Layouts are the driver installations a fake root can imitate:
//   - host: a driver installed on the host (driver root /) or the GPU
//     Operator's driver container (/run/nvidia/driver), whose root is a
//     distribution's: libraries beside the C library in
//     usr/lib/x86_64-linux-gnu, tools in usr/bin.
//   - gke: GKE's /home/kubernetes/bin/nvidia: libraries in lib64 (only the
//     driver's), tools in bin.
var Layouts = map[string]Layout{
	"host": {Name: "host", LibDir: LibDir, BinDir: BinDir, ForeignLibc: true, Shell: true},
	"gke":  {Name: "gke", LibDir: "lib64", BinDir: "bin"},
}

// Names of the fake tools in Options.ToolsDir (built by `make build`).
const (
	FakeNvidiaSMI  = "gpudra-fake-nvidia-smi"
	FakeMPSControl = "gpudra-fake-mps-control"
	FakeIMEX       = "gpudra-fake-imex"
	FakeIMEXCtl    = "gpudra-fake-imex-ctl"
)

// Options of Generate.
type Options struct {
	// Dir is the root to create or refresh.
	Dir string
	// Profile is a built-in simulation profile name or a profile file path
	// (see sim.Load); ProfileDirs are searched for <name>.yaml first.
	Profile     string
	ProfileDirs []string
	// Node is the node name; it seeds the simulated GPU UUIDs.
	Node string
	// NVMLLibrary is the built simulated libnvidia-ml (make sim-nvml-lib).
	NVMLLibrary string
	// FMLibrary is the built simulated libnvfm (make sim-fm-lib); needed
	// only for a profile that runs Fabric Manager (sim.Profile.FabricManager).
	FMLibrary string
	// ToolsDir holds the fake tools (Tools);
	// default: the directory of the running executable.
	ToolsDir string
	// Layout names one of Layouts; default "host".
	Layout string
}

// Config is <root>/etc/gpudra-sim/config.json, read by the simulated
// library at nvmlInit. Relative paths in it are relative to the root.
type Config struct {
	Profile     string   `json:"profile"`
	ProfileDirs []string `json:"profileDirs"`
	Node        string   `json:"node"`
	StateFile   string   `json:"stateFile"`
	FaultFile   string   `json:"faultFile"`
	ProcessDir  string   `json:"processDir"`
}

// ownedEntries are the top-level entries of a root that Generate writes;
// everything in them except var/lib/gpudra-sim is replaced on every run.
// tmp is there as on every real root: a whole-system root (host layout) has
// one (a chrooted MPS daemon Pod mounts an emptyDir over it, and its pipe and
// log directories below that; roots of earlier versions may have a
// tmp/nvidia-mps the container runtime made there).
var ownedEntries = []string{"bin", "dev", "etc", "lib", "lib64", "proc", "run", "sys", "tmp", "usr", "var"}

// Generate creates the fake driver root opts.Dir, or refreshes an existing
// one. The simulator state under var/lib/gpudra-sim is kept. Generate must
// run as root (it creates device nodes).
func Generate(opts Options) error {
	if err := opts.complete(); err != nil {
		return err
	}
	profile, err := sim.Load(opts.Profile, opts.ProfileDirs)
	if err != nil {
		return err
	}
	if err := checkFMLibrary(profile.FabricManager, opts.FMLibrary); err != nil {
		return err
	}
	cfg, profileCopy, err := configFor(opts, profile)
	if err != nil {
		return err
	}
	facts, err := readFacts(profile, opts.Node)
	if err != nil {
		return err
	}
	if err := checkRoot(opts.Dir); err != nil {
		return err
	}
	if err := clean(opts.Dir); err != nil {
		return err
	}
	w := &writer{root: opts.Dir}
	w.writeConfig(cfg, profileCopy)
	w.stateDir()
	layout := Layouts[opts.Layout]
	w.libraries(layout, facts.DriverVersion, opts.NVMLLibrary)
	w.fabricManager(layout, profile.FabricManager, opts.FMLibrary)
	w.firmware(facts.DriverVersion)
	w.binaries(layout, opts.ToolsDir)
	if layout.Shell {
		w.system(opts.ToolsDir)
	}
	w.deviceNodes(facts)
	w.proc(facts)
	w.sys(facts)
	w.pciDrivers(facts.busIDs())
	w.iommufd(profile.IOMMUFD)
	w.numa(facts.NUMA)
	if w.err != nil {
		return fmt.Errorf("generate fake driver root %s: %w", opts.Dir, w.err)
	}
	return nil
}

func (o *Options) complete() error {
	if o.Layout == "" {
		o.Layout = "host"
	}
	if _, ok := Layouts[o.Layout]; !ok {
		return fmt.Errorf("unknown driver layout %q: want host or gke", o.Layout)
	}
	missing := func(what, flag string) error {
		return fmt.Errorf("no %s given: set %s", what, flag)
	}
	switch {
	case o.Dir == "":
		return missing("root directory", "--dir (Options.Dir)")
	case o.Profile == "":
		return fmt.Errorf("no simulation profile given: set --profile to one of %v or a profile file", sim.Builtin())
	case o.Node == "":
		return missing("node name", "--node (Options.Node); it seeds the GPU UUIDs")
	case o.NVMLLibrary == "":
		return missing("simulated libnvidia-ml", "--nvml-library (build it with `make sim-nvml-lib`)")
	}
	var err error
	if o.Dir, err = filepath.Abs(o.Dir); err != nil {
		return err
	}
	if o.Dir == "/" {
		return errors.New("refusing to generate a fake driver root in /: give a directory of its own")
	}
	if fi, err := os.Stat(o.NVMLLibrary); err != nil {
		return fmt.Errorf("simulated libnvidia-ml (build it with `make sim-nvml-lib`): %w", err)
	} else if !fi.Mode().IsRegular() {
		return fmt.Errorf("simulated libnvidia-ml %s is not a regular file", o.NVMLLibrary)
	}
	if o.ToolsDir == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find the fake tools next to this executable: %w; set --tools-dir", err)
		}
		o.ToolsDir = filepath.Dir(exe)
	}
	for _, tool := range slices.Sorted(maps.Values(Tools)) {
		if _, err := os.Stat(filepath.Join(o.ToolsDir, tool)); err != nil {
			return fmt.Errorf("fake tool %s not found in %s (build it with `make build`, or set --tools-dir): %w", tool, o.ToolsDir, err)
		}
	}
	return nil
}

// configFor returns the root's config and, for a profile read from a file,
// the file's content and its path in the root: the file is copied so that
// the root is self-contained. The copy keeps the file's base name, from which
// a profile without a name field takes its name (and so its GPU UUIDs).
func configFor(opts Options, p *sim.Profile) (Config, *profileFile, error) {
	cfg := Config{Profile: opts.Profile, ProfileDirs: []string{}, Node: opts.Node, StateFile: StateFile, FaultFile: FaultFile,
		ProcessDir: ProcessDir}
	if p.Source == "builtin" {
		return cfg, nil, nil
	}
	data, err := os.ReadFile(p.Source)
	if err != nil {
		return cfg, nil, fmt.Errorf("copy simulation profile into the root: %w", err)
	}
	cfg.Profile = filepath.Join(ProfilesDir, filepath.Base(p.Source))
	return cfg, &profileFile{path: cfg.Profile, data: data}, nil
}

type profileFile struct {
	path string
	data []byte
}

// checkRoot refuses a directory that is neither empty nor a fake driver
// root: clean removes whole subtrees of it.
func checkRoot(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && len(entries) == 0) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read fake driver root: %w", err)
	}
	for _, e := range entries {
		if !slices.Contains(ownedEntries, e.Name()) {
			return fmt.Errorf("refusing to write a fake driver root into %s: it holds %q, which a fake driver root never has; give an empty or new directory", dir, e.Name())
		}
	}
	for _, marker := range []string{ConfigFile, StateDir} {
		if _, err := os.Stat(filepath.Join(dir, marker)); err == nil {
			return nil
		}
	}
	return fmt.Errorf("refusing to write a fake driver root into %s: it is not empty and has neither %s nor %s; give an empty or new directory", dir, ConfigFile, StateDir)
}

// clean removes what an earlier run generated, keeping var/lib/gpudra-sim.
func clean(dir string) error {
	for _, e := range ownedEntries {
		if e == "var" {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e)); err != nil {
			return fmt.Errorf("refresh fake driver root: %w", err)
		}
	}
	return nil
}

// ReadConfig reads the config of a fake driver root.
func ReadConfig(root string) (*Config, error) {
	b, err := os.ReadFile(filepath.Join(root, ConfigFile))
	if err != nil {
		return nil, err
	}
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(root, ConfigFile), err)
	}
	return &c, nil
}

func (w *writer) writeConfig(cfg Config, profile *profileFile) {
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		w.fail(err)
		return
	}
	w.file(ConfigFile, append(b, '\n'), 0o644)
	if profile != nil {
		w.file(profile.path, profile.data, 0o644)
	}
}

// stateDir creates var/lib/gpudra-sim and an empty fault file; what is
// there already is left alone.
func (w *writer) stateDir() {
	w.mkdir(StateDir)
	path := filepath.Join(w.root, FaultFile)
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		w.file(FaultFile, []byte(faultFileHeader), 0o644)
	}
}

// WriteFaults replaces the fault file of the fake driver root root by
// lines (test/sim/faultfile.go), atomically. The simulated libnvidia-ml of a
// running plugin reads that file every poll; os.WriteFile empties it before
// writing, and a poll in between reads no faults at all: every GPU repaired
// and every fabric line gone for one poll, a change the plugin then
// publishes.
func WriteFaults(root, lines string) error {
	return atomicfile.WriteFile(filepath.Join(root, FaultFile), []byte(lines), 0o644)
}

const faultFileHeader = `# Faults of this simulated node, one per line (see test/sim/faultfile.go):
#   gpu-3 xid 79 | gpu-0 ecc | gpu-2 lost | gpu-1 thermal
# Removing a line repairs the GPU.
`
