//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/internal/plugin"
	"github.com/gpudra/gpudra/test/localcluster"
)

// ldcacheScript is the command of the pods below, written the way NVIDIA's
// manifests write theirs (bash -c): print the container's ld cache, then
// stay up until deleted.
const ldcacheScript = `ldconfig -p; echo ldcache-end; trap 'exit 0' TERM; sleep 2147483647 & wait`

// TestRealCDIHook: with the chart's default values the CDI specs name the
// plugin's own copy of NVIDIA's nvidia-cdi-hook in its plugin directory
// (the nodes have no toolkit, like GPU Operator and GKE nodes), and runc
// runs the real hook for every GPU container: its update-ldcache puts the
// driver libraries CDI mounted into the container's ld cache, which a
// container without a claim does not have.
func TestRealCDIHook(t *testing.T) {
	ns := namespace(t)
	applyYAML(t, ns, `
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-gpu}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu.gpudra.io}
---
apiVersion: v1
kind: Pod
metadata: {name: with-gpu}
spec:
  containers:
  - name: ctr
    image: registry.local/gpudra/workload:local
    command: ["bash", "-c", "`+ldcacheScript+`"]
    resources:
      claims: [{name: gpu}]
  resourceClaims:
  - name: gpu
    resourceClaimTemplateName: one-gpu
---
apiVersion: v1
kind: Pod
metadata: {name: without-gpu}
spec:
  containers:
  - name: ctr
    image: registry.local/gpudra/workload:local
    command: ["bash", "-c", "`+ldcacheScript+`"]
`)
	waitRunning(t, ns, "with-gpu", "without-gpu")
	withGPU, withoutGPU := ldcache(t, ns, "with-gpu"), ldcache(t, ns, "without-gpu")
	for _, lib := range []string{"libcuda.so.1", "libnvidia-ml.so.1", "libnvidia-ptxjitcompiler.so.1"} {
		if !strings.Contains(withGPU, lib+" (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/") {
			t.Errorf("the GPU container's ld cache lacks %s (the hook's update-ldcache did not run):\n%s", lib, withGPU)
		}
		if strings.Contains(withoutGPU, lib) {
			t.Errorf("a container without a claim has %s in its ld cache:\n%s", lib, withoutGPU)
		}
	}
	if !strings.Contains(withoutGPU, "libc.so.6 (libc6,x86-64") {
		t.Errorf("the workload image's own ld cache lacks libc.so.6:\n%s", withoutGPU)
	}

	// The spec of the pod's claim names the installed hook, which is on
	// the node's host path, executable.
	node := pod(t, ns, "with-gpu").Spec.NodeName
	installed := filepath.Join(localcluster.KubeletRoot, "plugins", "gpu.gpudra.io", plugin.CDIHookFile)
	specs, err := filepath.Glob(specPath(node, "*"))
	if err != nil || len(specs) == 0 {
		t.Fatalf("no CDI specs on %s: %v", node, err)
	}
	named := false
	for _, s := range specs {
		data, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		var spec cdispec.Spec
		if err := json.Unmarshal(data, &spec); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		hooks := spec.ContainerEdits.Hooks
		for _, d := range spec.Devices {
			hooks = append(hooks, d.ContainerEdits.Hooks...)
		}
		for _, h := range hooks {
			if h.Path != installed {
				t.Errorf("%s: hook %v names %s, not the installed hook %s", s, h.Args, h.Path, installed)
			}
			named = true
		}
	}
	if !named {
		t.Errorf("no CDI spec on %s names the installed hook %s", node, installed)
	}
	fi, err := os.Stat(realCluster.Node(node).HostPathOf(installed))
	if err != nil || fi.Mode().Perm()&0o111 == 0 {
		t.Errorf("the installed hook %s on %s: %v (mode %v)", installed, node, err, fi)
	}
}

// ldcache returns the ld cache a pod's container printed (ldcacheScript).
func ldcache(t *testing.T, ns, name string) string {
	t.Helper()
	var out string
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		var err error
		out, err = kubectl("-n", ns, "logs", name)
		return err == nil && strings.Contains(out, "ldcache-end"), nil
	})
	if err != nil {
		t.Fatalf("logs of %s/%s: %v\n%s", ns, name, err, out)
	}
	return out
}
