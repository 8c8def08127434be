package status

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpudra/gpudra/internal/shared/telemetry/names"
)

// ErrMetricsNeedToken: the plugin pod serves /metrics only to a bearer
// token (--metrics-secure, the chart's kubeletPlugin.metrics.authentication),
// and the API server's pod proxy passes none on. The CLI does not ask such a
// plugin; its telemetry columns stay empty.
var ErrMetricsNeedToken = errors.New("its /metrics needs a bearer token (kubeletPlugin.metrics.authentication), " +
	"which the API server's pod proxy does not pass on")

// needsToken reports whether the pod's plugin runs with --metrics-secure.
func needsToken(p *corev1.Pod) bool {
	for _, c := range p.Spec.Containers {
		args := append(slices.Clone(c.Command), c.Args...)
		if slices.Contains(args, "--"+names.FlagMetricsSecure) || slices.Contains(args, "--"+names.FlagMetricsSecure+"=true") {
			return true
		}
	}
	return false
}

// Notices are the lines that say why the telemetry of some of nodes is
// missing, from the errors of ReadPluginMetrics or ScrapePlugins: one line
// for all nodes whose plugin needs a token, one per other node.
func Notices(errs map[string]error, nodes map[string]bool) []string {
	var token, lines []string
	for node, err := range errs {
		switch {
		case !nodes[node]:
		case errors.Is(err, ErrMetricsNeedToken):
			token = append(token, node)
		default:
			lines = append(lines, fmt.Sprintf("No GPU telemetry for node %s: %v", node, err))
		}
	}
	sort.Strings(lines)
	if len(token) > 0 {
		sort.Strings(token)
		lines = append([]string{fmt.Sprintf("No GPU telemetry (USED, UTIL) for node %s: the plugin's /metrics needs a bearer token "+
			"(kubeletPlugin.metrics.authentication), which the API server's pod proxy does not pass on; "+
			"read it with a token that may get /metrics, e.g. in Prometheus", strings.Join(token, ", "))}, lines...)
	}
	return lines
}

// NothingReadable is an error when no plugin was read and every plugin that
// was found needs a token: recording usage cannot show anything.
func NothingReadable(read int, errs map[string]error) error {
	if read > 0 || len(errs) == 0 {
		return nil
	}
	for _, err := range errs {
		if !errors.Is(err, ErrMetricsNeedToken) {
			return nil
		}
	}
	return fmt.Errorf("no plugin's GPU telemetry can be read: %w; read it from Prometheus, "+
		"or install without kubeletPlugin.metrics.authentication to use gpudra usage", ErrMetricsNeedToken)
}
