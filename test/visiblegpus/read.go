package visiblegpus

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Paths are where ReadInputs looks.
type Paths struct {
	// Dev is the container's /dev.
	Dev string
	// DriverProc is the driver's /proc directory (/proc/driver/nvidia);
	// a missing one is not an error.
	DriverProc string
}

// DefaultPaths are a container's own.
var DefaultPaths = Paths{Dev: "/dev", DriverProc: "/proc/driver/nvidia"}

// ReadInputs reads the device nodes and the driver's GPU descriptions;
// environ is the environment to use (os.Environ()).
func ReadInputs(p Paths, environ []string) (Inputs, error) {
	in := Inputs{Environ: environ}
	entries, err := os.ReadDir(p.Dev)
	if err != nil {
		return in, fmt.Errorf("list device nodes: %w", err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "nvidia") && !e.IsDir() {
			in.DevNodes = append(in.DevNodes, e.Name())
		}
	}
	caps, err := os.ReadDir(filepath.Join(p.Dev, "nvidia-caps"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return in, fmt.Errorf("list MIG capability nodes: %w", err)
	}
	for _, e := range caps {
		in.CapNodes = append(in.CapNodes, e.Name())
	}
	files, err := filepath.Glob(filepath.Join(p.DriverProc, "gpus", "*", "information"))
	if err != nil {
		return in, fmt.Errorf("list the driver's GPU files: %w", err)
	}
	sort.Strings(files)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return in, fmt.Errorf("read the driver's GPU file: %w", err)
		}
		g, err := ParseProcInformation(string(data))
		if err != nil {
			return in, fmt.Errorf("%s: %w", f, err)
		}
		in.Proc = append(in.Proc, g)
	}
	return in, nil
}
