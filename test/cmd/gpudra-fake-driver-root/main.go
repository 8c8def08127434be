// Command gpudra-fake-driver-root creates or refreshes a fake NVIDIA driver
// root for a simulated node (see test/fakedriver): run the kubelet plugin
// with --nvidia-driver-root=<dir> to exercise its real code path without a
// GPU. It must run as root (it creates device nodes). `make fake-driver-root`
// builds what it needs and runs it.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"

	"github.com/gpudra/gpudra/test/fakedriver"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	opts, err := parseFlags(args, stderr)
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "gpudra-fake-driver-root:", err)
		return 2
	}
	if err := fakedriver.Generate(opts); err != nil {
		_, _ = fmt.Fprintln(stderr, "gpudra-fake-driver-root:", err)
		return 1
	}
	_, _ = fmt.Fprintf(stdout, "fake driver root %s: profile %s, node %s\n", opts.Dir, opts.Profile, opts.Node)
	return 0
}

func parseFlags(args []string, stderr io.Writer) (fakedriver.Options, error) {
	var o fakedriver.Options
	fs := pflag.NewFlagSet("gpudra-fake-driver-root", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.Dir, "dir", "", "Directory of the fake driver root, created or refreshed (required; the simulator state under var/lib/gpudra-sim is kept).")
	fs.StringVar(&o.Profile, "profile", "", "Simulation profile: a built-in name or a profile file, copied into the root (required).")
	fs.StringSliceVar(&o.ProfileDirs, "profile-dir", nil, "Directory searched for <profile>.yaml before the built-in profiles; repeat for several.")
	fs.StringVar(&o.Node, "node", "", "Node name; it seeds the simulated GPU UUIDs (required).")
	fs.StringVar(&o.NVMLLibrary, "nvml-library", "", "The simulated libnvidia-ml built by `make sim-nvml-lib` (required).")
	fs.StringVar(&o.FMLibrary, "fm-library", "", "The simulated libnvfm built by `make sim-fm-lib` (required for a profile that runs Fabric Manager).")
	fs.StringVar(&o.Layout, "layout", "host", "Driver installation to imitate: host (a host's or the GPU Operator's driver container: usr/lib/x86_64-linux-gnu, usr/bin) or gke (/home/kubernetes/bin/nvidia: lib64, bin).")
	fs.StringVar(&o.ToolsDir, "tools-dir", "", "Directory with "+fakedriver.FakeNvidiaSMI+", "+fakedriver.FakeMPSControl+", "+fakedriver.FakeIMEX+" and "+fakedriver.FakeIMEXCtl+" (default: this executable's directory).")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return o, nil
}
