package telemetry

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGrafanaDashboard: the chart's dashboard queries only metrics and
// labels the sampler serves.
func TestGrafanaDashboard(t *testing.T) {
	data, err := os.ReadFile("../../../deployments/helm/gpudra/dashboards/gpudra-gpus.json")
	require.NoError(t, err)
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			ID      int    `json:"id"`
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	require.NoError(t, json.Unmarshal(data, &dash))
	require.Equal(t, "gpudra-gpus", dash.UID)
	known := []string{MetricUtilization, MetricMemoryUsed, MetricMemoryTotal, MetricPower, MetricPowerLimit, MetricTemperature,
		MetricSMClock, MetricSMClockMax, MetricThrottleReason, MetricXIDs}
	labels := append(slices.Clone(deviceLabels), "reason", "xid")
	metricRE := regexp.MustCompile(`gpudra_[a-z_]+`)
	labelRE := regexp.MustCompile(`([a-z_]+)\s*(?:=~|!=|=)\s*"|by \(([^)]*)\)|label_values\([^,]*,\s*([a-z_]+)\)`)
	var exprs []string
	ids := map[int]bool{}
	for _, p := range dash.Panels {
		assert.False(t, ids[p.ID], "panel id %d repeats", p.ID)
		ids[p.ID] = true
		if p.Type != "row" {
			assert.NotEmpty(t, p.Targets, p.Title)
		}
		for _, target := range p.Targets {
			exprs = append(exprs, target.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		exprs = append(exprs, v.Definition)
	}
	queried := map[string]bool{}
	for _, e := range exprs {
		for _, m := range metricRE.FindAllString(e, -1) {
			assert.Contains(t, known, m, "in %s", e)
			queried[m] = true
		}
		for _, m := range labelRE.FindAllStringSubmatch(e, -1) {
			for _, group := range m[1:] {
				for _, l := range regexp.MustCompile(`[a-z_]+`).FindAllString(group, -1) {
					assert.Contains(t, labels, l, "in %s", e)
				}
			}
		}
	}
	for _, m := range known {
		assert.True(t, queried[m], "the dashboard shows %s", m)
	}
}
