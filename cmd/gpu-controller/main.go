// Command gpu-controller is gpudra's cluster-wide controller: the validating
// admission webhook for GpuClaimParameters and the DeviceClass manager.
package main

import (
	"context"
	"os"

	"github.com/spf13/cobra"

	"github.com/gpudra/gpudra/internal/controller"
	"github.com/gpudra/gpudra/internal/shared/cmdmain"
	"github.com/gpudra/gpudra/internal/shared/envflag"
)

func main() { cmdmain.Main(newCommand()) }

func newCommand() *cobra.Command {
	opts := &controller.Options{}
	cmd := &cobra.Command{
		Use:   "gpu-controller",
		Short: "Admission webhook and DeviceClass manager for the gpudra DRA driver",
		Long: "gpu-controller validates the GpuClaimParameters of ResourceClaims, ResourceClaimTemplates and DeviceClasses " +
			"(every replica) and keeps gpudra's DeviceClasses (the elected leader).",
		Args: cobra.NoArgs,
	}
	opts.AddFlags(cmd.Flags())
	envflag.Bind(cmd, os.LookupEnv, controller.EnvVars...)
	return cmdmain.Command(cmd, opts.Validate, func(ctx context.Context) error { return controller.Run(ctx, opts) })
}
