// Command gpu-kubelet-plugin is gpudra's DRA kubelet plugin for NVIDIA GPUs.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/pkg/plugin"
)

func main() {
	if err := newCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}

func newCommand() *cobra.Command {
	opts := &plugin.Options{}
	logConfig := logsapi.NewLoggingConfiguration()
	cmd := &cobra.Command{
		Use:           "gpu-kubelet-plugin",
		Short:         "DRA kubelet plugin for NVIDIA GPUs (gpudra)",
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := logsapi.ValidateAndApply(logConfig, nil); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			ctx = klog.NewContext(ctx, klog.Background().WithName("gpu-kubelet-plugin"))
			return plugin.Run(ctx, opts)
		},
	}
	opts.AddFlags(cmd.Flags())
	logsapi.AddFlags(logConfig, cmd.Flags())
	cmd.AddCommand(newInspectCommand())
	cobra.OnFinalize(logs.FlushLogs)
	return cmd
}

func newInspectCommand() *cobra.Command {
	opts := &plugin.Options{}
	var output string
	cmd := &cobra.Command{
		Use:   "inspect",
		Short: "Print the GPUs found and the ResourceSlices that would be published, without a cluster",
		Example: "  gpu-kubelet-plugin inspect                        # real GPUs through NVML\n" +
			"  gpu-kubelet-plugin inspect --simulate=dgx-h100 -o json",
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
	cmd.Flags().StringVarP(&output, "output", "o", "yaml", "Output format: yaml or json.")
	return cmd
}
