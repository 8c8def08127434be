// Command gpudra is gpudra's command-line tool. Installed as kubectl-gpudra
// on the PATH it is also a kubectl plugin: `kubectl gpudra status`.
package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/cli/status"
	"github.com/gpudra/gpudra/internal/cli/usage"
	"github.com/gpudra/gpudra/internal/shared/cmdmain"
	"github.com/gpudra/gpudra/internal/shared/compat"
)

func main() { cmdmain.Main(newCommand()) }

func newCommand() *cobra.Command {
	var kubeconfig, context, pluginNamespace string
	root := &cobra.Command{Use: "gpudra", Short: "Inspect gpudra's GPUs in a cluster", SilenceUsage: true, SilenceErrors: true}
	root.PersistentFlags().StringVar(&kubeconfig, "kubeconfig", "", "Kubeconfig file (default: $KUBECONFIG or ~/.kube/config).")
	root.PersistentFlags().StringVar(&context, "context", "", "Kubeconfig context to use.")
	root.PersistentFlags().StringVar(&pluginNamespace, "plugin-namespace", status.DefaultPluginNamespace,
		"Namespace gpudra is installed in (the Helm release's): only plugin pods there are read for GPU telemetry.")

	newClient := func() (kubernetes.Interface, error) {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rules.ExplicitPath = kubeconfig
		cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules,
			&clientcmd.ConfigOverrides{CurrentContext: context}).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("load kubeconfig: %w", err)
		}
		return kubernetes.NewForConfig(cfg)
	}

	var output, node, driver, compatibility string
	var all, telemetry bool
	var metricsURLs map[string]string
	statusCmd := &cobra.Command{
		Use:   "status",
		Short: "Per node, every GPU: model, memory, use, health, taints, and the pod and claim holding it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, err := newClient()
			if err != nil {
				return err
			}
			names, err := compat.Resolve(compat.Flags{Compatibility: compatibility, Driver: driver, DriverFlag: "--driver"})
			if err != nil {
				return err
			}
			devices, err := status.Collect(cmd.Context(), client, names.Driver, node)
			if err != nil {
				return err
			}
			if !all {
				devices = status.InUse(devices)
			}
			if telemetry {
				addUsage(cmd, client, pluginNamespace, devices, metricsURLs)
			}
			return status.Print(cmd.OutOrStdout(), devices, output)
		},
	}
	statusCmd.Flags().StringVarP(&output, "output", "o", "table", "Output format: table or json.")
	statusCmd.Flags().StringVar(&node, "node", "", "Only this node.")
	statusCmd.Flags().StringVar(&driver, "driver", v1alpha1.DriverName, "DRA driver name.")
	statusCmd.Flags().StringVar(&compatibility, "compatibility", "",
		"nvidia: the driver was installed in NVIDIA compatibility mode (driver gpu.nvidia.com); empty for gpudra's names.")
	statusCmd.Flags().BoolVar(&all, "all", false, "Also list dynamic MIG placements that no claim holds (every placement of every profile).")
	statusCmd.Flags().BoolVar(&telemetry, "telemetry", true,
		"Show each device's memory in use and utilization from its node's plugin /metrics (read through the API server's pod proxy: "+
			"needs list on pods and get on pods/proxy in --plugin-namespace).")
	statusCmd.Flags().StringToStringVar(&metricsURLs, "metrics-url", nil,
		"Read the plugin metrics of these nodes from URLs instead of the plugin pods, e.g. gpu-h100=http://127.0.0.1:30900/metrics (port forwards, plugins outside pods).")
	root.AddCommand(statusCmd, usage.NewCommand(newClient, func() string { return pluginNamespace }))
	return root
}

// addUsage annotates the devices with their plugins' GPU telemetry; what
// cannot be read is said on stderr and shown as "-".
func addUsage(cmd *cobra.Command, client kubernetes.Interface, pluginNamespace string, devices []status.Device, urls map[string]string) {
	nodes := map[string]bool{}
	for _, d := range devices {
		nodes[d.Node] = true
	}
	var usage map[string]map[string]status.Usage
	var errs map[string]error
	if len(urls) > 0 {
		usage, errs = status.ScrapeURLs(cmd.Context(), urls)
	} else {
		var err error
		if usage, errs, err = status.ScrapePlugins(cmd.Context(), client, pluginNamespace); err != nil {
			_, _ = fmt.Fprintf(cmd.ErrOrStderr(), "No GPU telemetry: %v\n", err)
			return
		}
		if len(usage) == 0 && len(errs) == 0 && len(devices) > 0 {
			_, _ = fmt.Fprintf(cmd.ErrOrStderr(), "No GPU telemetry: no running gpudra plugin pod (%s) in namespace %s; "+
				"set --plugin-namespace to gpudra's namespace, or for plugins outside pods use --metrics-url NODE=URL\n",
				status.PluginSelector, pluginNamespace)
		}
	}
	for _, line := range status.Notices(errs, nodes) {
		_, _ = fmt.Fprintln(cmd.ErrOrStderr(), line)
	}
	status.Annotate(devices, usage)
}
