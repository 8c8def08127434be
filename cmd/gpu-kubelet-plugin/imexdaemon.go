package main

import (
	"context"
	"os"

	"github.com/spf13/cobra"

	"github.com/gpudra/gpudra/internal/plugin/imexdaemon"
	"github.com/gpudra/gpudra/internal/shared/cmdmain"
)

// newIMEXDaemonCommand is the entry point of a ComputeDomain's IMEX daemon
// Pods (the controller's DaemonSet names `imex-daemon run` and, as the
// readiness probe, `imex-daemon check`); both read the contract's
// environment (internal/shared/imex).
func newIMEXDaemonCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:    "imex-daemon",
		Short:  "Run or check the IMEX daemon of a ComputeDomain (the entry point of the controller's daemon Pods)",
		Args:   cobra.NoArgs,
		Hidden: true,
	}
	run := &cobra.Command{Use: "run", Short: "Run nvidia-imex for this node's part of the ComputeDomain", Args: cobra.NoArgs}
	check := &cobra.Command{Use: "check", Short: "Exit 0 only if the local nvidia-imex is READY", Args: cobra.NoArgs}
	cmd.AddCommand(
		cmdmain.Command(run, nil, func(ctx context.Context) error {
			return imexdaemon.Run(ctx, imexdaemon.FromEnv(os.LookupEnv))
		}),
		cmdmain.Command(check, nil, func(ctx context.Context) error {
			return imexdaemon.Check(ctx, imexdaemon.FromEnv(os.LookupEnv))
		}),
	)
	return cmd
}
