// Command gpudra-gpu-verify checks gpudra's kubelet-plugin code paths on a
// machine with NVIDIA GPUs, read-only on GPU settings: NVML and discovery,
// the ResourceSlice, prepare/unprepare of whole-GPU claims with the node's
// real CDI edits, the generated CDI specs, GPU health events and probes,
// telemetry, the rows of the NVML fidelity table a GPU answers read-only, the
// driver's tools, passthrough's sysfs files and what NVML adds to a process's
// memory.
// See test/gpuverify. Build it with `make gpu-verify`; the exit status is 0
// only when every check passed.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/test/gpuverify"
	"github.com/gpudra/gpudra/test/nvmlmem"
)

func main() {
	// Step 9's child processes are this program (gpuverify.SelfFootprint).
	nvmlmem.RunChild()
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gpudra-gpu-verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	host, _ := os.Hostname()
	driverRoot := fs.String("nvidia-driver-root", "/", "Root under which the NVIDIA driver is installed, as for gpu-kubelet-plugin (/run/nvidia/driver with the GPU Operator, or a fake driver root).")
	hookPath := fs.String("nvidia-cdi-hook-path", "", "Host path of nvidia-cdi-hook for the generated CDI hooks, as for gpu-kubelet-plugin "+
		"(default: the nvidia-cdi-hook next to this program, which make gpu-verify builds as the gpudra image's, else nvcdi's /usr/bin/nvidia-cdi-hook).")
	nodeName := fs.String("node-name", host, "Node (pool) name used in the ResourceSlice and the claims.")
	driverName := fs.String("driver-name", v1alpha1.DriverName, "DRA driver name.")
	watch := fs.Duration("watch", 60*time.Second, "How long to watch NVML health events and probes.")
	probeInterval := fs.Duration("probe-interval", 5*time.Second, "Health monitor probe interval, as --health-probe-interval of the plugin.")
	tmpDir := fs.String("tmp-dir", "", "Parent directory of the temporary CDI, checkpoint and lock directories (default $TMPDIR or /tmp).")
	asJSON := fs.Bool("json", false, "Print the report as JSON instead of text (with the full inspection and CDI specs).")
	failOnCorrections := fs.Bool("fail-on-table-corrections", false, "Fail the run (exit status 1) when a real GPU answers a row of the NVML "+
		"fidelity table (docs/nvml-fidelity.md) with a code its real column does not name; by default such table corrections are only reported.")
	showSlices := fs.Bool("slices", false, "Text report: also print the ResourceSlices as YAML, as `gpu-kubelet-plugin inspect` does.")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.Var(klogFlags.Lookup("v").Value, "v", "Log verbosity of the plugin code (logs go to stderr).")
	fs.Usage = func() {
		_, _ = fmt.Fprintf(stderr, "Usage: gpudra-gpu-verify [flags]\n\n%s\n\nFlags:\n", gpuverify.ReadOnlyStatement)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		_, _ = fmt.Fprintf(stderr, "unexpected arguments %v\n", fs.Args())
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background().WithName("gpu-verify"))

	// NVML and the CDI edits as gpu-kubelet-plugin gets them.
	cfg := gpuverify.ForDriverRoot(*driverRoot, gpuverify.DefaultHookPath(*hookPath))
	cfg.NodeName, cfg.DriverName = *nodeName, *driverName
	cfg.Watch, cfg.ProbeInterval, cfg.TempDir, cfg.ShowSlices = *watch, *probeInterval, *tmpDir, *showSlices
	cfg.FailOnTableCorrections = *failOnCorrections
	report, err := gpuverify.Run(ctx, cfg)
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "Error:", err)
		return 2
	}
	klog.Flush()
	if *asJSON {
		err = report.WriteJSON(stdout)
	} else {
		err = report.WriteText(stdout)
	}
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "Error: write the report:", err)
		return 2
	}
	if !report.OK() {
		return 1
	}
	return 0
}
