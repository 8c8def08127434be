package main

import (
	"context"
	"os"

	"github.com/spf13/cobra"

	"github.com/gpudra/gpudra/internal/plugin/cdplugin"
	"github.com/gpudra/gpudra/internal/shared/cmdmain"
	"github.com/gpudra/gpudra/internal/shared/envflag"
)

// newComputeDomainCommand runs the kubelet plugin of the ComputeDomain
// channel driver (compute-domain.gpudra.io; compute-domain.nvidia.com with
// --compatibility=nvidia): the node's IMEX channels and daemon device
// (internal/plugin/cdplugin). The chart runs it as a second container of
// the kubelet plugin's pod when computeDomains.enabled is set.
func newComputeDomainCommand() *cobra.Command {
	opts := &cdplugin.Options{}
	cmd := &cobra.Command{
		Use:   "compute-domain",
		Short: "Run the kubelet plugin of the ComputeDomain IMEX channel driver",
		Args:  cobra.NoArgs,
	}
	opts.AddFlags(cmd.Flags())
	envflag.Bind(cmd, os.LookupEnv, cdplugin.EnvVars...)
	return cmdmain.Command(cmd, opts.Validate, func(ctx context.Context) error { return cdplugin.Run(ctx, opts) })
}
