package fakedriver

import (
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpudra/gpudra/internal/shared/atomicfile"
	"github.com/gpudra/gpudra/test/images"
)

// StubLibrary is a driver library the root holds as a stub: nvcdi mounts
// every lib*.so.<driver version> of the driver's library directory into
// containers and creates their SONAME links there.
type StubLibrary struct {
	// Base name without ".so.<version>", e.g. "libcuda".
	Base string
	// SONAME as in the real driver; the root has the link SONAME ->
	// <Base>.so.<version>. Empty when the SONAME is the versioned name.
	SONAME string
}

// StubLibraries are the compute and utility libraries of the real driver
// (what NVIDIA_DRIVER_CAPABILITIES=compute,utility gives a container) other
// than libnvidia-ml, which is the simulated library itself.
var StubLibraries = []StubLibrary{
	{"libcuda", "libcuda.so.1"},
	{"libcudadebugger", "libcudadebugger.so.1"},
	{"libnvidia-cfg", "libnvidia-cfg.so.1"},
	{"libnvidia-gpucomp", ""},
	{"libnvidia-nvvm", "libnvidia-nvvm.so.4"},
	{"libnvidia-opencl", "libnvidia-opencl.so.1"},
	{"libnvidia-ptxjitcompiler", "libnvidia-ptxjitcompiler.so.1"},
}

// NVMLSONAME is the name the plugin dlopens; it links to
// libnvidia-ml.so.<version>, the copied simulated library.
const NVMLSONAME = "libnvidia-ml.so.1"

// ForeignLibc is the C library of the root's library directory: an ELF
// object with libc.so.6's SONAME that defines no symbol and no version, so
// that a program which loads it instead of its own C library fails at
// start ("version GLIBC_2.x not found", "symbol lookup error").
const ForeignLibc = "libc.so.6"

// StubBinaries are the driver binaries nvcdi mounts that have no fake: they
// exit 1 saying they are stubs.
var StubBinaries = []string{"nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-server"}

// RecordHook records a container with simulated GPUs as a GPU process
// (hook.go) and exits 0. It is no part of a driver installation and not
// named by CDI specs (they name the real nvidia-cdi-hook, which the plugin
// installs): the local cluster's NRI plugin (test/cmd/gpudra-sim-nri) adds
// it to every container as a createContainer hook.
const RecordHook = "usr/libexec/gpudra-sim/record-process"

// FirmwareFiles are the GSP firmware files, in lib/firmware/nvidia/<version>/,
// that nvcdi mounts (gsp*.bin).
var FirmwareFiles = []string{"gsp_ga10x.bin", "gsp_tu10x.bin"}

// Tools maps the names the fake tools get in usr/bin to their builds.
// nvidia-imex and nvidia-imex-ctl come with NVIDIA's IMEX package, which
// hosts with multi-node NVLink install beside the driver.
var Tools = map[string]string{"nvidia-smi": FakeNvidiaSMI, "nvidia-cuda-mps-control": FakeMPSControl,
	"nvidia-imex": FakeIMEX, "nvidia-imex-ctl": FakeIMEXCtl}

func (w *writer) libraries(layout Layout, version, nvmlLibrary string) {
	libDir := layout.LibDir
	nvml := "libnvidia-ml.so." + version
	w.copyFile(nvmlLibrary, filepath.Join(libDir, nvml), 0o755)
	w.symlink(nvml, filepath.Join(libDir, NVMLSONAME))
	for _, l := range StubLibraries {
		name := l.Base + ".so." + version
		soname := l.SONAME
		if soname == "" {
			soname = name
		}
		w.file(filepath.Join(libDir, name), stubELF(soname), 0o755)
		if soname != name {
			w.symlink(name, filepath.Join(libDir, soname))
		}
	}
	// Installed by the driver because many programs dlopen it by this name.
	w.symlink("libcuda.so.1", filepath.Join(libDir, "libcuda.so"))
	// The host's own C library lives beside the driver's libraries (Debian,
	// Ubuntu, RHEL): one the image's loader cannot use, as when the host's
	// glibc differs from the image's. A tool started with this directory on
	// its library path fails here as it would on such a host.
	if layout.ForeignLibc {
		w.file(filepath.Join(libDir, ForeignLibc), stubELF(ForeignLibc), 0o755)
	}
}

func (w *writer) firmware(version string) {
	for _, f := range FirmwareFiles {
		w.file(filepath.Join("lib/firmware/nvidia", version, f), []byte("stub GSP firmware of a fake driver root (gpudra test/fakedriver)\n"), 0o644)
	}
}

func (w *writer) binaries(layout Layout, toolsDir string) {
	for name, tool := range Tools {
		w.copyFile(filepath.Join(toolsDir, tool), filepath.Join(layout.BinDir, name), 0o755)
	}
	for _, name := range StubBinaries {
		script := "#!/bin/sh\necho \"" + name + ": a stub of a fake driver root (gpudra test/fakedriver); there is no GPU\" >&2\nexit 1\n"
		w.file(filepath.Join(layout.BinDir, name), []byte(script), 0o755)
	}
	w.file(RecordHook, []byte(hookScript), 0o755)
}

// writer writes into a root; after the first error it does nothing and
// keeps that error.
type writer struct {
	root string
	err  error
}

func (w *writer) fail(err error) {
	if w.err == nil {
		w.err = err
	}
}

func (w *writer) path(rel string) string { return filepath.Join(w.root, rel) }

func (w *writer) mkdir(rel string) {
	if w.err == nil {
		w.fail(os.MkdirAll(w.path(rel), 0o755))
	}
}

// file writes a new file (never in place: a running process may have the
// old one mapped) and gives it mode, whatever the umask.
func (w *writer) file(rel string, data []byte, mode os.FileMode) {
	w.create(rel, mode, func(f io.Writer) error {
		_, err := f.Write(data)
		return err
	})
}

func (w *writer) copyFile(src, rel string, mode os.FileMode) {
	w.create(rel, mode, func(f io.Writer) error {
		in, err := os.Open(src)
		if err != nil {
			return err
		}
		defer func() { _ = in.Close() }()
		_, err = io.Copy(f, in)
		return err
	})
}

// create writes rel with atomicfile, without fsync: a fake driver root is
// a test fixture, generated again whenever it is needed, so it need not
// survive a power loss, and the hundreds of files of a root would each pay
// for an fsync.
func (w *writer) create(rel string, mode os.FileMode, fill func(io.Writer) error) {
	w.mkdir(filepath.Dir(rel))
	if w.err != nil {
		return
	}
	w.fail(atomicfile.Write(w.path(rel), mode, atomicfile.SyncNone, fill))
}

// symlink creates rel -> target (target relative to rel's directory).
func (w *writer) symlink(target, rel string) {
	w.mkdir(filepath.Dir(rel))
	if w.err == nil {
		w.fail(os.Symlink(target, w.path(rel)))
	}
}

// SystemLibDir holds a host-layout root's own C library: searched before
// LibDir by the root's loader (the root has no ld.so.cache), so a program
// chrooted into the root gets it, not the foreign libc.so.6 of LibDir.
const SystemLibDir = "lib/x86_64-linux-gnu"

// system makes the root chroot-able like a real system's: bin/sh, and the
// loader and C libraries that it and the fake tools need, copied from this
// machine into SystemLibDir (the loader at its own path).
func (w *writer) system(toolsDir string) {
	if w.err != nil {
		return
	}
	sh, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		w.fail(fmt.Errorf("a shell for the root: %w", err))
		return
	}
	bins := []string{sh}
	for _, tool := range Tools {
		// Tests give scripts as tools; only programs need libraries.
		if f, err := elf.Open(filepath.Join(toolsDir, tool)); err == nil {
			_ = f.Close()
			bins = append(bins, filepath.Join(toolsDir, tool))
		}
	}
	rt, err := images.HostRuntime("/", bins, nil)
	if err != nil {
		w.fail(fmt.Errorf("the C library of the root's shell and tools (build the tools with cgo): %w", err))
		return
	}
	// A whole system's root has a world-writable, sticky /tmp.
	w.mkdir("tmp")
	if w.err == nil {
		w.fail(os.Chmod(w.path("tmp"), 0o777|os.ModeSticky))
	}
	// And a /dev/shm: a chrooted MPS daemon Pod mounts the claim's shm
	// directory there, on a driver root it mounts read-only, so the mount
	// point must be there already (mpspod.PodConfig.Pod).
	w.mkdir("dev/shm")
	w.copyFile(sh, "bin/sh", 0o755)
	w.copyFile(rt.Interpreter, strings.TrimPrefix(rt.Interpreter, "/"), 0o755)
	for soname, p := range rt.Libraries {
		w.copyFile(p, filepath.Join(SystemLibDir, soname), 0o755)
	}
}
