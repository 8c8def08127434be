package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpudra/gpudra/internal/plugin/mpspod"
	"github.com/gpudra/gpudra/internal/shared/cmdmain"
)

// newMPSDaemonCommand is the entry point of an MPS control daemon Pod
// (internal/plugin/mpspod): the image has no shell, so the plugin binary
// starts nvidia-cuda-mps-control itself.
func newMPSDaemonCommand() *cobra.Command {
	var o mpspod.DaemonOptions
	cmd := &cobra.Command{
		Use:    mpspod.Subcommand,
		Short:  "Run the MPS control daemon of one claim (the entry point of the Pods the plugin creates)",
		Args:   cobra.NoArgs,
		Hidden: true,
	}
	fs := cmd.Flags()
	fs.StringVar(&o.Control, "control", "", "nvidia-cuda-mps-control (inside --chroot if set)")
	fs.StringVar(&o.Chroot, "chroot", "", "Driver root to run the daemon chrooted in (a root with a shell)")
	fs.StringVar(&o.PipeDir, "pipe-dir", "", "CUDA_MPS_PIPE_DIRECTORY as the daemon sees it")
	fs.StringVar(&o.LogDir, "log-dir", "", "CUDA_MPS_LOG_DIRECTORY as the daemon sees it")
	fs.StringSliceVar(&o.Devices, "devices", nil, "UUIDs of the GPUs the daemon serves")
	fs.StringArrayVar(&o.Settings, "set", nil, "Control command sent once the daemon answers (repeatable)")
	fs.DurationVar(&o.StartTimeout, "start-timeout", time.Minute, "How long to wait for the daemon to answer")
	for _, f := range []string{"control", "pipe-dir", "log-dir", "devices"} {
		_ = cmd.MarkFlagRequired(f)
	}
	return cmdmain.Command(cmd, func() error { return nil }, func(ctx context.Context) error { return mpspod.RunDaemon(ctx, o) })
}
