// Command gpudra-fake-cri serves a fake CRI runtime on a unix socket for
// end-to-end tests that run a real kubelet without a container runtime. It
// injects the CDI devices of each container like containerd would and writes
// a container log that tells which GPUs the container got.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/test/fakecri"
)

type options struct {
	listen      string
	cdiSpecDirs []string
	gpuInfo     string
	stateFile   string
	processDir  string
}

func main() {
	opts, err := parseFlags(os.Args[1:])
	if errors.Is(err, pflag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpudra-fake-cri:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	logger := klog.Background().WithName("gpudra-fake-cri")
	err = run(klog.NewContext(ctx, logger), opts)
	stop()
	if err != nil {
		logger.Error(err, "Fake CRI runtime failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

func parseFlags(args []string) (*options, error) {
	opts := &options{}
	fs := pflag.NewFlagSet("gpudra-fake-cri", pflag.ContinueOnError)
	fs.StringVar(&opts.listen, "listen", "", "Unix socket path to serve the CRI runtime and image services on (required).")
	fs.StringSliceVar(&opts.cdiSpecDirs, "cdi-spec-dir", fakecri.DefaultCDISpecDirs,
		"CDI spec directory, in increasing priority; repeat or comma-separate for several.")
	fs.StringVar(&opts.gpuInfo, "gpu-info", "",
		"JSON file mapping GPU UUIDs to product names. Default: <cdi-spec-dir>/../"+fakecri.GPUInfoFileName+" of each spec dir, if present.")
	fs.StringVar(&opts.stateFile, "state-file", "", "File to append one JSON line to per created container (optional).")
	fs.StringVar(&opts.processDir, "sim-process-dir", "",
		"Process directory of the node's simulated driver root (<root>/var/lib/gpudra-sim/processes): running containers with GPUs are recorded there, which makes the simulated GPUs busy (optional).")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlagSet(klogFlags)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if opts.listen == "" {
		return nil, errors.New("--listen is required")
	}
	if len(opts.cdiSpecDirs) == 0 {
		return nil, errors.New("--cdi-spec-dir must name at least one directory")
	}
	return opts, nil
}

// run serves until ctx is cancelled, then stops and removes the socket.
func run(ctx context.Context, opts *options) error {
	logger := klog.FromContext(ctx)
	infoPaths := fakecri.DefaultGPUInfoPaths(opts.cdiSpecDirs)
	if opts.gpuInfo != "" {
		infoPaths = []string{opts.gpuInfo}
	}
	rt, err := fakecri.New(fakecri.Options{
		CDISpecDirs: opts.cdiSpecDirs,
		ProductName: fakecri.FileProductLookup(logger, infoPaths...),
		StateFile:   opts.stateFile,
		ProcessDir:  opts.processDir,
	})
	if err != nil {
		return fmt.Errorf("create fake CRI runtime: %w", err)
	}
	if err := rt.Start(ctx, opts.listen); err != nil {
		return fmt.Errorf("start fake CRI runtime: %w", err)
	}
	logger.Info("Ready", "gpuInfo", infoPaths, "stateFile", opts.stateFile)
	<-ctx.Done()
	logger.Info("Shutting down", "cause", context.Cause(ctx))
	rt.Stop()
	return nil
}
