// Package nvmlmem measures what an NVML library adds to a process's
// resident memory. A child process (Main) loads and initialises the library
// as the plugin does (go-nvml's dlopen, nvmlInit) and reads each GPU's
// handle, UUID, name and memory as discovery does, then idles; Measure
// starts it once without the library and once with it and reads both. The
// benchmark measures the simulated libnvidia-ml with it (test/e2e,
// through gpudra-nvml-idle), the GPU verification kit a node's real one
// (test/gpuverify, through the kit's own binary).
package nvmlmem

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/test/procmem"
)

// Subcommand is the first argument that makes a program that embeds Main
// (the GPU verification kit) run it instead of its own main.
const Subcommand = "nvml-idle"

// readyPrefix starts the line the child prints once initialised, followed
// by the number of GPUs it read.
const readyPrefix = "ready gpus="

// RunChild runs Main and exits when this program was started as Measure's
// child (first argument Subcommand); otherwise it returns. Programs measured
// through SelfCommand (the kit, and tests) call it first.
func RunChild() {
	if len(os.Args) > 1 && os.Args[1] == Subcommand {
		os.Exit(Main(os.Args[2:], os.Stdout, os.Stderr))
	}
}

// SelfCommand is an Options.Command that starts this program as the child;
// the program must call RunChild first.
func SelfCommand(ctx context.Context) (func(args ...string) *exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return func(args ...string) *exec.Cmd {
		return exec.CommandContext(ctx, exe, append([]string{Subcommand}, args...)...)
	}, nil
}

// Main is the child: with -library it loads and initialises that
// libnvidia-ml and reads its GPUs; without, it only idles. It prints
// "ready gpus=<n>" once done and waits for SIGTERM or SIGINT.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(Subcommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	library := fs.String("library", "", "libnvidia-ml to load and initialise; empty: idle without NVML")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	gpus := 0
	if *library != "" {
		lib := nvml.New(nvml.WithLibraryPath(*library))
		if ret := lib.Init(); ret != nvml.SUCCESS {
			_, _ = fmt.Fprintf(stderr, "nvmlInit of %s: %v\n", *library, ret)
			return 1
		}
		n, err := readGPUs(lib)
		if err != nil {
			_, _ = fmt.Fprintf(stderr, "%s: %v\n", *library, err)
			return 1
		}
		gpus = n
	}
	// As the plugin once started: what start-up left goes back now.
	debug.FreeOSMemory()
	_, _ = fmt.Fprintf(stdout, "%s%d\n", readyPrefix, gpus)
	<-stop
	return 0
}

// readGPUs reads what discovery reads first of each GPU.
func readGPUs(lib nvml.Interface) (int, error) {
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return 0, fmt.Errorf("nvmlDeviceGetCount: %w", ret)
	}
	for i := range n {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return 0, fmt.Errorf("nvmlDeviceGetHandleByIndex(%d): %w", i, ret)
		}
		if _, ret := d.GetUUID(); ret != nvml.SUCCESS {
			return 0, fmt.Errorf("GPU %d: nvmlDeviceGetUUID: %w", i, ret)
		}
		if _, ret := d.GetName(); ret != nvml.SUCCESS {
			return 0, fmt.Errorf("GPU %d: nvmlDeviceGetName: %w", i, ret)
		}
		if _, ret := d.GetMemoryInfo(); ret != nvml.SUCCESS {
			return 0, fmt.Errorf("GPU %d: nvmlDeviceGetMemoryInfo: %w", i, ret)
		}
	}
	return n, nil
}

// Footprint is what a library adds to an idle process, in MiB.
type Footprint struct {
	Library string `json:"library"`
	// GPUs is how many GPUs the child read.
	GPUs int `json:"gpus"`
	// RSS, Anon and File are the differences in VmRSS, RssAnon and RssFile
	// between the child with the library and the child without.
	RSS  float64 `json:"rssMiB"`
	Anon float64 `json:"anonMiB"`
	File float64 `json:"fileMiB"`
	// Mapped is the resident memory of the library's own mappings in the
	// child with it (part of File).
	Mapped float64 `json:"libraryMappedMiB"`
}

// Options of Measure.
type Options struct {
	// Command returns the child's command for Main's arguments (e.g.
	// exec.Command(kit, Subcommand, args...)).
	Command func(args ...string) *exec.Cmd
	// Settle is how long each child idles before it is read.
	Settle time.Duration
	// BeforeStart, when set, runs before each child starts (the benchmark
	// drops the files from the page cache, as after a node's start).
	BeforeStart func() error
}

// Measure starts the child without the library and then with it, reads
// each one Settle after it is ready, and returns the differences.
func Measure(ctx context.Context, library string, o Options) (Footprint, error) {
	without, _, err := idle(ctx, o)
	if err != nil {
		return Footprint{}, err
	}
	with, gpus, err := idle(ctx, o, "-library", library)
	if err != nil {
		return Footprint{}, err
	}
	return Footprint{Library: library, GPUs: gpus, RSS: with.rss - without.rss, Anon: with.anon - without.anon,
		File: with.file - without.file, Mapped: with.mapped}, nil
}

type reading struct{ rss, anon, file, mapped float64 }

// idle starts one child, waits until it is ready and Settle more, reads it
// and stops it.
func idle(ctx context.Context, o Options, args ...string) (r reading, gpus int, err error) {
	if o.BeforeStart != nil {
		if err := o.BeforeStart(); err != nil {
			return r, 0, err
		}
	}
	cmd := o.Command(args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return r, 0, err
	}
	if err := cmd.Start(); err != nil {
		return r, 0, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	rest, ok := strings.CutPrefix(strings.TrimSpace(line), readyPrefix)
	if err != nil || !ok {
		// Its exit (Wait) completes stderr.
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if err == nil {
			err = fmt.Errorf("printed %q", line)
		}
		return r, 0, fmt.Errorf("%s %s did not become ready: %w: %s", cmd.Path, strings.Join(args, " "), err,
			strings.TrimSpace(stderr.String()))
	}
	if _, err := fmt.Sscan(rest, &gpus); err != nil {
		return r, 0, fmt.Errorf("%s: ready line %q: %w", cmd.Path, line, err)
	}
	select {
	case <-time.After(o.Settle):
	case <-ctx.Done():
		return r, 0, ctx.Err()
	}
	pid := cmd.Process.Pid
	var errs []error
	read := func(field string) float64 {
		v, err := procmem.Status(pid, field)
		errs = append(errs, err)
		return v
	}
	r = reading{rss: read("VmRSS"), anon: read("RssAnon"), file: read("RssFile")}
	r.mapped, err = procmem.Mapped(pid, "libnvidia-ml.so")
	errs = append(errs, err)
	return r, gpus, errors.Join(errs...)
}
