package nvmlsim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ConfigPath is where a fake driver root keeps the simulator's
// configuration, relative to the root.
const ConfigPath = "etc/gpudra-sim/config.json"

// RootEnv, when set, names the fake driver root and overrides the search
// from the library's own file path.
const RootEnv = "GPUDRA_SIM_NVML_ROOT"

// TraceEnv, when set at nvmlInit, makes the library log every NVML call it
// answers: "stderr" (or "1") logs to stderr, anything else is a file that
// gets one line per call appended.
const TraceEnv = "GPUDRA_SIM_NVML_TRACE"

// Config is etc/gpudra-sim/config.json of a fake driver root. Relative paths
// in it are relative to the root.
type Config struct {
	// Profile is a built-in profile name or a profile file path.
	Profile string `json:"profile"`
	// ProfileDirs are searched for <profile>.yaml before the built-in profiles.
	ProfileDirs []string `json:"profileDirs,omitempty"`
	// Node is the Kubernetes node name; it seeds the simulated GPU UUIDs.
	Node string `json:"node"`
	// StateFile keeps the MIG state across restarts (sim.Server.PersistTo).
	// Empty: MIG changes are lost at the last nvmlShutdown.
	StateFile string `json:"stateFile,omitempty"`
	// FaultFile is the fault control file (sim.FaultFile). Empty: no faults.
	FaultFile string `json:"faultFile,omitempty"`
	// ProcessDir holds the simulated compute processes (sim.Process, one
	// file each), which make GPUs busy. Empty: every GPU stays idle.
	ProcessDir string `json:"processDir,omitempty"`
}

// LoadConfig reads the configuration of the fake driver root and makes its
// paths absolute. Every error names the file.
func LoadConfig(root string) (*Config, error) {
	file := filepath.Join(root, ConfigPath)
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read simulator configuration: %w", err)
	}
	var c Config
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%s: %w (fields: profile, profileDirs, node, stateFile, faultFile, processDir)", file, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s: more than one JSON value", file)
	}
	switch {
	case c.Profile == "":
		return nil, fmt.Errorf("%s: profile is empty: name a built-in profile (dgx-a100, dgx-h100, h200, l4, mixed) or a profile file", file)
	case c.Node == "":
		return nil, fmt.Errorf("%s: node is empty: set it to the Kubernetes node name (it seeds the GPU UUIDs)", file)
	}
	if isProfilePath(c.Profile) {
		c.Profile = inRoot(root, c.Profile)
	}
	for i, d := range c.ProfileDirs {
		c.ProfileDirs[i] = inRoot(root, d)
	}
	if c.StateFile != "" {
		c.StateFile = inRoot(root, c.StateFile)
	}
	if c.FaultFile != "" {
		c.FaultFile = inRoot(root, c.FaultFile)
	}
	if c.ProcessDir != "" {
		c.ProcessDir = inRoot(root, c.ProcessDir)
	}
	return &c, nil
}

// WriteConfig writes c as the configuration of the fake driver root.
func WriteConfig(root string, c Config) error {
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	file := filepath.Join(root, ConfigPath)
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return fmt.Errorf("write simulator configuration: %w", err)
	}
	if err := os.WriteFile(file, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write simulator configuration: %w", err)
	}
	return nil
}

// isProfilePath mirrors sim.Load: a profile with a separator or a YAML
// suffix is a file, anything else a name.
func isProfilePath(p string) bool {
	return strings.ContainsRune(p, '/') || strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")
}

func inRoot(root, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(root, p)
}

// FindRoot returns the fake driver root: envRoot when set (it must hold the
// configuration), else the nearest directory above one of libPaths (the
// library's own file, as loaded and as resolved) that does.
func FindRoot(envRoot string, libPaths []string) (string, error) {
	if envRoot != "" {
		if _, err := os.Stat(filepath.Join(envRoot, ConfigPath)); err != nil {
			return "", fmt.Errorf("%s=%s: %w; point it at a fake driver root (make fake-driver-root)", RootEnv, envRoot, err)
		}
		return envRoot, nil
	}
	var tried []string
	for _, lib := range libPaths {
		if lib == "" {
			continue
		}
		abs, err := filepath.Abs(lib)
		if err != nil {
			continue
		}
		for dir := filepath.Dir(abs); ; dir = filepath.Dir(dir) {
			if _, err := os.Stat(filepath.Join(dir, ConfigPath)); err == nil {
				return dir, nil
			} else if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrPermission) {
				return "", fmt.Errorf("looking for %s above %s: %w", ConfigPath, lib, err)
			}
			if dir == filepath.Dir(dir) {
				break
			}
		}
		tried = append(tried, abs)
	}
	if len(tried) == 0 {
		return "", fmt.Errorf("%s is not set and the library cannot tell its own file path; set %s to the fake driver root", RootEnv, RootEnv)
	}
	return "", fmt.Errorf("no %s in any directory above %s and %s is not set: install the library into a fake driver root (make fake-driver-root) or set %s",
		ConfigPath, strings.Join(tried, ", "), RootEnv, RootEnv)
}

// MappedFile returns the file that /proc/self/maps (its content in maps)
// shows mapped at addr.
func MappedFile(maps []byte, addr uintptr) (string, bool) {
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		// 7f12a4000000-7f12a4021000 r-xp 00000000 08:01 1234  /path/to/lib.so
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || !strings.HasPrefix(fields[5], "/") {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || uint64(addr) < start || uint64(addr) >= end {
			continue
		}
		// A path may contain spaces; the kernel appends " (deleted)" to
		// files removed since they were mapped.
		path := strings.Join(fields[5:], " ")
		return strings.TrimSuffix(path, " (deleted)"), true
	}
	return "", false
}

// SelfPaths returns the candidate paths of the library containing addr:
// loadedAs (the name it was opened by, from dladdr; may be empty), that name
// with symbolic links resolved, and the file /proc/self/maps shows at addr.
func SelfPaths(loadedAs string, addr uintptr) []string {
	var out []string
	add := func(p string) {
		for _, q := range out {
			if q == p {
				return
			}
		}
		if p != "" {
			out = append(out, p)
		}
	}
	add(loadedAs)
	if loadedAs != "" {
		if r, err := filepath.EvalSymlinks(loadedAs); err == nil {
			add(r)
		}
	}
	if maps, err := os.ReadFile("/proc/self/maps"); err == nil {
		if p, ok := MappedFile(maps, addr); ok {
			add(p)
		}
	}
	return out
}
