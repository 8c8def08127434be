//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The reference driver, measured in the same run as gpudra: with
// REFERENCE_PLUGIN=<path to a dra-example-kubeletplugin binary> (built from
// kubernetes-sigs/dra-example-driver's source; see docs/performance-method.md),
// BenchmarkDRASock starts it beside gpudra's plugin, as a host process
// against the same API server, and runs each case on both in alternating
// blocks (drasock_interleave_test.go; sub-benchmarks reference-<case>). REFERENCE_PLUGIN_ARGS adds
// flags; by default its client rate limit is lifted (--kube-api-qps=-1:
// client-go then uses no limiter), as gpudra reads claims without one.

// referenceDriver is the example driver's default driver name, its
// DeviceClass and its devices' names (gpu-0...).
const referenceDriver = "gpu.example.com"

// startReferencePlugin runs the reference plugin for pool node with 8
// devices and waits until it serves dra.sock; nil without REFERENCE_PLUGIN.
func startReferencePlugin(b *testing.B, node string) *benchPlugin {
	bin := os.Getenv("REFERENCE_PLUGIN")
	if bin == "" {
		return nil
	}
	dir := b.TempDir()
	registry := filepath.Join(dir, "registry")
	if err := os.MkdirAll(registry, 0o750); err != nil {
		b.Fatal(err)
	}
	p := &benchPlugin{node: node, log: filepath.Join(dir, "plugin.log"),
		socket:  filepath.Join(dir, "plugins", referenceDriver, "dra.sock"),
		dataDir: filepath.Join(dir, "plugins", referenceDriver)}
	args := []string{"--node-name", node, "--kubeconfig", kubeconfig, "--num-devices", "8",
		"--cdi-root", benchCDIRoot(b, dir), "--kubelet-plugins-directory-path", filepath.Join(dir, "plugins"),
		"--kubelet-registrar-directory-path", registry, "--healthcheck-port", "-1", "--metrics-port", "-1"}
	extra := "--kube-api-qps=-1"
	if v, ok := os.LookupEnv("REFERENCE_PLUGIN_ARGS"); ok {
		extra = v
	}
	args = append(args, strings.Fields(extra)...)
	dropPageCache(b, bin)
	p.start(b, "reference plugin", bin, args...)
	return p
}

// referenceName is the sub-benchmark name of a case run on the reference.
func referenceName(name string) string { return fmt.Sprintf("reference-%s", name) }
