// Command gpu-controller is gpudra's cluster-wide controller: the validating
// admission webhook for GpuClaimParameters and the DeviceClass manager.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/pkg/controller"
)

func main() {
	if err := newCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}

func newCommand() *cobra.Command {
	opts := &controller.Options{}
	logConfig := logsapi.NewLoggingConfiguration()
	cmd := &cobra.Command{
		Use:   "gpu-controller",
		Short: "Admission webhook and DeviceClass manager for the gpudra DRA driver",
		Long: "gpu-controller validates the GpuClaimParameters of ResourceClaims and ResourceClaimTemplates " +
			"(every replica) and keeps gpudra's DeviceClasses (the elected leader).",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.Validate(); err != nil {
				return err
			}
			if err := logsapi.ValidateAndApply(logConfig, nil); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			ctx = klog.NewContext(ctx, klog.Background().WithName(controller.ComponentName))
			return controller.Run(ctx, opts)
		},
	}
	opts.AddFlags(cmd.Flags())
	logsapi.AddFlags(logConfig, cmd.Flags())
	cobra.OnFinalize(logs.FlushLogs)
	return cmd
}
