// Command gpu-kubelet-plugin is gpudra's DRA kubelet plugin for NVIDIA GPUs.
package main

import (
	"context"
	"os"

	"github.com/spf13/cobra"

	"github.com/gpudra/gpudra/internal/plugin"
	"github.com/gpudra/gpudra/internal/shared/cmdmain"
	"github.com/gpudra/gpudra/internal/shared/envflag"
)

func main() { cmdmain.Main(newCommand()) }

func newCommand() *cobra.Command {
	opts := &plugin.Options{}
	cmd := &cobra.Command{
		Use:   "gpu-kubelet-plugin",
		Short: "DRA kubelet plugin for NVIDIA GPUs (gpudra)",
		Args:  cobra.NoArgs,
	}
	opts.AddFlags(cmd.Flags())
	envflag.Bind(cmd, os.LookupEnv, plugin.EnvVars...)
	cmd.AddCommand(newInspectCommand(), newMPSDaemonCommand(), newIMEXDaemonCommand(), newComputeDomainCommand())
	return cmdmain.Command(cmd, opts.Validate, func(ctx context.Context) error { return plugin.Run(ctx, opts) })
}

func newInspectCommand() *cobra.Command {
	opts := &plugin.Options{}
	var output string
	cmd := &cobra.Command{
		Use:   "inspect",
		Short: "Print the GPUs found and the ResourceSlices that would be published, without a cluster",
		Example: "  gpu-kubelet-plugin inspect                                # the host's driver\n" +
			"  gpu-kubelet-plugin inspect --nvidia-driver-root=/run/nvidia/driver -o json\n" +
			"  make inspect PROFILE=dgx-h100                             # a simulated driver root, no GPU",
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ins, err := plugin.Inspect(context.Background(), opts)
			if err != nil {
				return err
			}
			return ins.Print(cmd.OutOrStdout(), output)
		},
	}
	opts.AddInspectFlags(cmd.Flags())
	envflag.Bind(cmd, os.LookupEnv, plugin.InspectEnvVars...)
	cmd.Flags().StringVarP(&output, "output", "o", "yaml", "Output format: yaml or json.")
	return cmd
}
