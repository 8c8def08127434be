package images

import (
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// GoBuild are the go build settings a binary must have been built with.
type GoBuild struct {
	CGOEnabled string
	Trimpath   bool
	LDFlags    string
}

func (b GoBuild) String() string {
	s := "CGO_ENABLED=" + b.CGOEnabled + " go build"
	if b.Trimpath {
		s += " -trimpath"
	}
	if b.LDFlags != "" {
		s += fmt.Sprintf(" -ldflags=%q", b.LDFlags)
	}
	return s
}

// Check compares the settings recorded in a Go binary with b. Go does not
// record -ldflags when -trimpath is set, so "-s" and "-w" are checked on
// the ELF file instead: no symbol table, no DWARF sections.
func (b GoBuild) Check(binary string) error {
	info, err := buildinfo.ReadFile(binary)
	if err != nil {
		return fmt.Errorf("read the Go build settings of %s: %w", binary, err)
	}
	var got GoBuild
	recordedLDFlags := false
	for _, s := range info.Settings {
		switch s.Key {
		case "CGO_ENABLED":
			got.CGOEnabled = s.Value
		case "-trimpath":
			got.Trimpath = s.Value == "true"
		case "-ldflags":
			got.LDFlags, recordedLDFlags = s.Value, true
		}
	}
	if !recordedLDFlags {
		if got.LDFlags, err = strippedFlags(binary); err != nil {
			return err
		}
		// Only -s and -w can be seen this way.
		want := strings.Fields(b.LDFlags)
		want = slices.DeleteFunc(want, func(f string) bool { return f != "-s" && f != "-w" })
		b.LDFlags = strings.Join(want, " ")
	}
	if got != b {
		return fmt.Errorf("%s was built with %s; the image needs it built as the Dockerfile does: %s (make images does)", binary, got, b)
	}
	return nil
}

// strippedFlags says which of the linker's -s (no symbol table) and -w (no
// DWARF) an ELF binary shows, as "-s -w", "-s", "-w" or "".
func strippedFlags(binary string) (string, error) {
	f, err := elf.Open(binary)
	if err != nil {
		return "", fmt.Errorf("read ELF binary %s: %w", binary, err)
	}
	defer func() { _ = f.Close() }()
	var flags []string
	if f.Section(".symtab") == nil {
		flags = append(flags, "-s")
	}
	if !slices.ContainsFunc(f.Sections, func(s *elf.Section) bool {
		return strings.HasPrefix(s.Name, ".debug_") || strings.HasPrefix(s.Name, ".zdebug_")
	}) {
		flags = append(flags, "-w")
	}
	return strings.Join(flags, " "), nil
}

// GoBuildOf reads the Dockerfile's build settings of the gpudra binaries:
// CGO_ENABLED from the build stage's ENV, -trimpath and -ldflags from its
// go build command.
func GoBuildOf(d *Dockerfile) (GoBuild, error) {
	var b GoBuild
	for _, kv := range d.Build.Env {
		if v, ok := strings.CutPrefix(kv, "CGO_ENABLED="); ok {
			b.CGOEnabled = v
		}
	}
	words := d.Build.GoBuild
	for i := 2; i < len(words); i++ {
		switch w := words[i]; {
		case w == "-trimpath" || w == "-trimpath=true":
			b.Trimpath = true
		case w == "-ldflags" && i+1 < len(words):
			b.LDFlags = words[i+1]
			i++
		case strings.HasPrefix(w, "-ldflags="):
			b.LDFlags = strings.TrimPrefix(w, "-ldflags=")
		case w == "&&" || w == ";":
			return b, nil
		}
	}
	return b, nil
}

// requireStatic fails unless binary is a statically linked ELF program
// (no program interpreter), as scratch-like images need.
func requireStatic(binary string) error {
	f, err := elf.Open(binary)
	if err != nil {
		return fmt.Errorf("read ELF binary %s: %w", binary, err)
	}
	defer func() { _ = f.Close() }()
	interp, _, err := dynamicInfo(f)
	if err != nil {
		return fmt.Errorf("ELF binary %s: %w", binary, err)
	}
	if interp != "" {
		return fmt.Errorf("%s is dynamically linked (interpreter %s); the image has no C library: build it with CGO_ENABLED=0 (make images does)", binary, interp)
	}
	return nil
}

// Image tarball file names in the output directory.
const (
	PauseTar    = "pause.tar"
	WorkloadTar = "workload.tar"
	// AllGPUsWorkloadTar is AllGPUsWorkloadImage.
	AllGPUsWorkloadTar = "workload-all-gpus.tar"
	GpudraTar          = "gpudra.tar"
)

// BuildAll writes pause.tar, workload.tar, workload-all-gpus.tar and
// gpudra.tar into outDir.
func BuildAll(outDir string, s Sources) ([]*Written, error) {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, fmt.Errorf("create the image directory: %w", err)
	}
	var out []*Written
	for _, b := range []struct {
		file string
		spec func(Sources) (Image, error)
	}{{PauseTar, PauseSpec}, {WorkloadTar, WorkloadSpec},
		{AllGPUsWorkloadTar, AllGPUsWorkloadSpec}, {GpudraTar, GpudraSpec}} {
		img, err := b.spec(s)
		if errors.Is(err, fs.ErrNotExist) {
			return out, fmt.Errorf("%s: %w (make images builds the binaries and unpacks busybox-static)", b.file, err)
		}
		if err != nil {
			return out, fmt.Errorf("%s: %w", b.file, err)
		}
		w, err := Write(filepath.Join(outDir, b.file), img)
		if err != nil {
			return out, err
		}
		out = append(out, w)
	}
	return out, nil
}
