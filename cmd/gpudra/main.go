// Command gpudra is gpudra's command-line tool. Installed as kubectl-gpudra
// on the PATH it is also a kubectl plugin: `kubectl gpudra status`.
package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/pkg/cli"
	"github.com/gpudra/gpudra/pkg/status"
)

func main() { cli.Main(newCommand()) }

func newCommand() *cobra.Command {
	var kubeconfig, context string
	root := &cobra.Command{Use: "gpudra", Short: "Inspect gpudra's GPUs in a cluster", SilenceUsage: true, SilenceErrors: true}
	root.PersistentFlags().StringVar(&kubeconfig, "kubeconfig", "", "Kubeconfig file (default: $KUBECONFIG or ~/.kube/config).")
	root.PersistentFlags().StringVar(&context, "context", "", "Kubeconfig context to use.")

	var output, node, driver string
	var all bool
	statusCmd := &cobra.Command{
		Use:   "status",
		Short: "Per node, every GPU: model, memory, health, taints, and the pod and claim holding it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rules := clientcmd.NewDefaultClientConfigLoadingRules()
			rules.ExplicitPath = kubeconfig
			cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules,
				&clientcmd.ConfigOverrides{CurrentContext: context}).ClientConfig()
			if err != nil {
				return fmt.Errorf("load kubeconfig: %w", err)
			}
			client, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			devices, err := status.Collect(cmd.Context(), client, driver, node)
			if err != nil {
				return err
			}
			if !all {
				devices = status.InUse(devices)
			}
			return status.Print(cmd.OutOrStdout(), devices, output)
		},
	}
	statusCmd.Flags().StringVarP(&output, "output", "o", "table", "Output format: table or json.")
	statusCmd.Flags().StringVar(&node, "node", "", "Only this node.")
	statusCmd.Flags().StringVar(&driver, "driver", v1alpha1.DriverName, "DRA driver name.")
	statusCmd.Flags().BoolVar(&all, "all", false, "Also list dynamic MIG placements that no claim holds (every placement of every profile).")
	root.AddCommand(statusCmd)
	return root
}
