//go:build e2e

package e2e

import (
	"context"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// TestGPUTelemetry: the plugin's /metrics carries the GPU of a running pod
// with the pod's claim and pod labels and a load (the running container is
// a process of the simulated GPU, recorded by the fake root's CDI hook);
// `gpudra status` shows its use (through the API server's pod proxy); once
// the pod is deleted the GPU's series has empty labels and no load.
func TestGPUTelemetry(t *testing.T) {
	ns := namespace(t)
	applyYAML(t, ns, `
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-h100}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.gpudra.io
          selectors:
          - cel: {expression: 'device.attributes["gpu.gpudra.io"].productName == "NVIDIA H100 80GB HBM3"'}
---
apiVersion: v1
kind: Pod
metadata: {name: trainer}
spec:
  containers:
  - name: cuda
    image: registry.local/gpudra/workload:local
    resources:
      claims: [{name: gpu}]
  resourceClaims:
  - name: gpu
    resourceClaimTemplateName: one-h100
`)
	waitRunning(t, ns, "trainer")
	dev := assertSeesAllocation(t, ns, "trainer", "cuda")[0]
	// The simulated GPUs show load while a container that got them runs: the
	// fake root's nvidia-cdi-hook records it for as long as the container's
	// PID namespace lives (test/fakedriver/hook.go).
	held := regexp.MustCompile(`(?m)^gpudra_gpu_utilization_ratio\{([^}]*)\} (\S+)$`)
	series := func() map[string]float64 { // the device's series: labels -> value
		out := map[string]float64{}
		for _, m := range held.FindAllStringSubmatch(scrapeURL(t, pluginMetricsURL(t, dev.node)), -1) {
			if strings.Contains(m[1], `device="`+dev.name+`"`) {
				v, _ := strconv.ParseFloat(m[2], 64)
				out[m[1]] = v
			}
		}
		return out
	}
	// Telemetry is sampled every 10 s (the chart's default).
	poll := func(what string, ok func(map[string]float64) bool) {
		t.Helper()
		var last map[string]float64
		err := wait.PollUntilContextTimeout(context.Background(), time.Second, time.Minute, true, func(context.Context) (bool, error) {
			last = series()
			return ok(last), nil
		})
		if err != nil {
			t.Fatalf("%s: the series of %s/%s are %v", what, dev.node, dev.name, last)
		}
	}
	poll("labelled and busy while the pod runs", func(s map[string]float64) bool {
		for labels, v := range s {
			if strings.Contains(labels, `pod_name="trainer"`) && strings.Contains(labels, `pod_namespace="`+ns+`"`) &&
				strings.Contains(labels, `claim_namespace="`+ns+`"`) && strings.Contains(labels, `uuid="`+dev.uuid+`"`) && v > 0.3 {
				return true
			}
		}
		return false
	})

	out, err := exec.Command(filepath.Join(repoRoot, "_output", "bin", "gpudra"), "status", "--kubeconfig", kubeconfig, "--node", dev.node).CombinedOutput()
	if err != nil {
		t.Fatalf("gpudra status: %v\n%s", err, out)
	}
	row := regexp.MustCompile(`(?m)^` + dev.node + `\s+` + dev.name + `\s.*\s(\d+(\.\d)?[MG]i)\s+(\d+)%\s+Healthy\s.*` + ns + `/trainer`)
	if !row.Match(out) {
		t.Errorf("gpudra status shows no memory use and utilization of %s held by %s/trainer:\n%s", dev.name, ns, out)
	}

	deletePod(t, ns, "trainer")
	poll("unlabelled and idle after the pod is gone", func(s map[string]float64) bool {
		for labels, v := range s {
			if len(s) == 1 && strings.Contains(labels, `claim_name="",`) && strings.Contains(labels, `pod_name="",`) && v == 0 {
				return true
			}
		}
		return false
	})
}

func scrapeURL(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}
