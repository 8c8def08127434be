// Package cmdmain is the command-line scaffolding the three gpudra programs share:
// component-base logging flags, a context cancelled on SIGTERM/SIGINT with a
// named contextual logger, and error reporting from main.
package cmdmain

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
)

// Command builds a daemon command named name: it registers the logging
// flags next to the ones cmd already has and, when run, applies them, runs
// validate (if any) and then run with a context that ends on SIGTERM or
// SIGINT and carries a logger named after the command.
func Command(cmd *cobra.Command, validate func() error, run func(ctx context.Context) error) *cobra.Command {
	logConfig := logsapi.NewLoggingConfiguration()
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		if validate != nil {
			if err := validate(); err != nil {
				return err
			}
		}
		if err := logsapi.ValidateAndApply(logConfig, nil); err != nil {
			return err
		}
		ctx, stop := signal.NotifyContext(c.Context(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		ctx = klog.NewContext(ctx, klog.Background().WithName(cmd.Name()))
		return run(ctx)
	}
	logsapi.AddFlags(logConfig, cmd.Flags())
	cobra.OnFinalize(logs.FlushLogs)
	return cmd
}

// Main executes cmd and exits non-zero with the error on failure.
func Main(cmd *cobra.Command) {
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}
