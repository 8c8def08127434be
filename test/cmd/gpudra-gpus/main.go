// Command gpudra-gpus prints the NVIDIA GPUs this container can see, like
// `nvidia-smi -L`, without NVML: from its /dev/nvidia<N> device nodes, the
// variables the gpudra CDI specs set and, where visible, the driver's /proc
// files (see test/visiblegpus). It is in the local cluster's workload image
// (test/images). Exit status 1 when no GPU is visible, 2 on bad usage.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/spf13/pflag"

	"github.com/gpudra/gpudra/test/visiblegpus"
)

func main() { os.Exit(run(os.Args[1:], os.Environ(), os.Stdout, os.Stderr)) }

func run(args, environ []string, stdout, stderr io.Writer) int {
	paths := visiblegpus.DefaultPaths
	var verbose bool
	fs := pflag.NewFlagSet("gpudra-gpus", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&paths.Dev, "dev", paths.Dev, "The container's device directory.")
	fs.StringVar(&paths.DriverProc, "proc", paths.DriverProc,
		"The NVIDIA driver's /proc directory, for product names (on a simulated node: the driver root's proc/driver/nvidia, mounted into the container).")
	fs.BoolVarP(&verbose, "verbose", "v", false, "Also print the device nodes and the GPU variables seen (\"dev NAME\", \"env KEY=value\" lines).")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		_, _ = fmt.Fprintln(stderr, "gpudra-gpus:", err)
		return 2
	}
	if fs.NArg() > 0 {
		_, _ = fmt.Fprintf(stderr, "gpudra-gpus: unexpected arguments %q\n", fs.Args())
		return 2
	}
	in, err := visiblegpus.ReadInputs(paths, environ)
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "gpudra-gpus:", err)
		return 1
	}
	r, err := visiblegpus.Discover(in)
	if r != nil {
		for _, w := range r.Warnings {
			_, _ = fmt.Fprintln(stderr, "gpudra-gpus: warning:", w)
		}
	}
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "gpudra-gpus:", err)
		return 1
	}
	if err := visiblegpus.Format(stdout, r); err != nil {
		_, _ = fmt.Fprintln(stderr, "gpudra-gpus:", err)
		return 1
	}
	if verbose {
		writeEvidence(stdout, in)
	}
	return 0
}

// writeEvidence lists what the result was made from.
func writeEvidence(w io.Writer, in visiblegpus.Inputs) {
	var lines []string
	for _, n := range in.DevNodes {
		lines = append(lines, "dev /dev/"+n)
	}
	for _, n := range in.CapNodes {
		lines = append(lines, "dev /dev/nvidia-caps/"+n)
	}
	var env []string
	for _, kv := range in.Environ {
		if strings.HasPrefix(kv, "GPUDRA_") || strings.HasPrefix(kv, "NVIDIA_") || strings.HasPrefix(kv, "CUDA_") {
			env = append(env, "env "+kv)
		}
	}
	sort.Strings(env)
	for _, l := range append(lines, env...) {
		_, _ = fmt.Fprintln(w, l)
	}
}
