package usage

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"github.com/gpudra/gpudra/internal/cli/status"
)

// NewCommand is `gpudra usage`: it records what each pod uses of its GPUs
// for a while and draws it into a PNG. client returns the cluster's client
// (from the root command's kubeconfig flags); pluginNamespace the namespace
// of the plugin pods (the root command's --plugin-namespace).
func NewCommand(client func() (kubernetes.Interface, error), pluginNamespace func() string) *cobra.Command {
	var o struct {
		interval, duration time.Duration
		out, namespace     string
		node               string
	}
	cmd := &cobra.Command{
		Use:   "usage",
		Short: "Record each pod's GPU utilization and memory for a while from the plugins' telemetry and plot it (PNG)",
		Long: "Reads the GPU telemetry of every node's gpudra plugin in --plugin-namespace (its /metrics, through the API\n" +
			"server's pod proxy: needs list on pods and get on pods/proxy there) every --interval for --duration, prints a line per sample, and writes a PNG with\n" +
			"each pod's GPU utilization and GPU memory in use over time. The plugins sample their GPUs every\n" +
			"--telemetry-interval (the chart's kubeletPlugin.telemetry.interval, 10s by default): a shorter --interval\n" +
			"shows the same value twice.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.out == "" {
				return fmt.Errorf("--output is required: the PNG file to write")
			}
			c, err := client()
			if err != nil {
				return err
			}
			read := func(ctx context.Context) (map[string][]byte, map[string]error, error) {
				raw, errs, err := status.ReadPluginMetrics(ctx, c, pluginNamespace())
				if err == nil {
					err = status.NothingReadable(len(raw), errs)
				}
				bodies := map[string][]byte{}
				for node, r := range raw {
					bodies[node] = r.Body
				}
				return bodies, errs, err
			}
			keep := func(s Sample) bool {
				return (o.namespace == "" || strings.HasPrefix(s.Pod, o.namespace+"/")) && (o.node == "" || s.Node == o.node)
			}
			h, err := Record(cmd.Context(), read, Options{Interval: o.interval, Duration: o.duration, Keep: keep, Log: cmd.OutOrStdout()})
			if err != nil {
				return fmt.Errorf("record GPU usage: %w", err)
			}
			return writePNG(h, o.out, o.namespace, o.node)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&o.duration, "duration", 2*time.Minute, "How long to record.")
	f.DurationVar(&o.interval, "interval", 10*time.Second, "Time between two reads of the plugins' metrics.")
	f.StringVarP(&o.out, "output", "o", "", "PNG file to write (required).")
	f.StringVarP(&o.namespace, "namespace", "n", "", "Only pods of this namespace.")
	f.StringVar(&o.node, "node", "", "Only pods on this node.")
	return cmd
}

func writePNG(h *History, path, namespace, node string) error {
	title := "GPU use per pod"
	if namespace != "" {
		title += ", namespace " + namespace
	}
	if node != "" {
		title += ", node " + node
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err := Render(h, title, f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
