//go:build e2e && faults

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpudra/gpudra/internal/plugin/failpoint"
	"github.com/gpudra/gpudra/test/images"
	"github.com/gpudra/gpudra/test/localcluster"
)

// failpointsFile is where the plugin pods look for armed failpoints: in the
// plugin's own hostPath directory, which every plugin pod of a node mounts
// at the same path.
const failpointsFile = "failpoints"

// armFile is the fault node's failpoints file as the host sees it.
func armFile() string { return filepath.Join(pluginDir(faultNode), failpointsFile) }

// useFailpointsImage imports the failpoints image into the nodes and helm
// upgrades the driver to it, with the plugin told where the failpoints file
// is; the test's cleanup upgrades back to the shipped image.
func useFailpointsImage(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	tar := filepath.Join(repoRoot, "_output", "images", "failpoints", images.FailpointsTar)
	if _, err := os.Stat(tar); err != nil {
		t.Fatalf("no failpoints image (run make images-failpoints): %v", err)
	}
	if err := realCluster.ImportImage(ctx, tar); err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(armFile())
	inPod := filepath.Join(localcluster.KubeletRoot, "plugins", driver, failpointsFile)
	start := time.Now()
	if err := realCluster.InstallDriver(ctx, "image.tag="+images.FailpointsImageTag,
		"kubeletPlugin.extraEnv[0].name="+failpoint.FileEnvVar, "kubeletPlugin.extraEnv[0].value="+inPod); err != nil {
		t.Fatalf("helm upgrade to the failpoints image: %v", err)
	}
	t.Logf("driver upgraded to the failpoints image in %v", time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		_ = os.Remove(armFile())
		if err := realCluster.InstallDriver(context.Background()); err != nil {
			t.Errorf("helm upgrade back to the shipped image: %v", err)
		}
	})
}

// arm writes the failpoints file: the plugin reads it on its next failpoint.
func arm(t *testing.T, spec string) {
	t.Helper()
	if err := os.WriteFile(armFile(), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(armFile()) })
}

// pluginContainer is the plugin container's status in p.
func pluginContainer(p *v1.Pod) *v1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == "plugin" {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// freshPluginPod returns the fault node's Ready plugin pod. A pod whose
// container was restarted before is replaced first (deleted; the DaemonSet
// makes a new one): the kubelet backs off a container's restarts (10 s,
// 20 s, 40 s, ...), a new pod's first restart is quick.
func freshPluginPod(t *testing.T) *v1.Pod {
	t.Helper()
	p := waitPluginReady(t, "", 0)
	if st := pluginContainer(p); st != nil && st.RestartCount > 0 {
		if err := realCluster.RestartPlugin(context.Background(), faultNode); err != nil {
			t.Fatal(err)
		}
		p = waitPluginReady(t, "", 0)
	}
	return p
}

// waitPluginReady waits until the fault node's plugin pod (the one with
// uid, if given) is Ready with its container restarted at least
// minRestarts times, and returns it.
func waitPluginReady(t *testing.T, uid types.UID, minRestarts int32) *v1.Pod {
	t.Helper()
	var p *v1.Pod
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, last = realCluster.PluginPod(ctx, faultNode)
		if last != nil {
			return false, nil
		}
		if uid != "" && p.UID != uid {
			last = fmt.Errorf("plugin pod %s replaced (uid %s, want %s)", p.Name, p.UID, uid)
			return false, last
		}
		if st := pluginContainer(p); st == nil || st.RestartCount < minRestarts {
			last = fmt.Errorf("plugin pod %s: container not restarted %d times yet", p.Name, minRestarts)
			return false, nil
		}
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodReady && c.Status == v1.ConditionTrue {
				return true, nil
			}
		}
		last = fmt.Errorf("plugin pod %s not Ready", p.Name)
		return false, nil
	})
	if err != nil {
		t.Fatalf("the plugin of %s: %v (%v)", faultNode, err, last)
	}
	return p
}

// pluginRestarted waits until the kubelet has restarted the container of
// the plugin pod uid (once more than the pod's status said before) and it
// is Ready again; it returns the container's restart count.
func pluginRestarted(t *testing.T, before *v1.Pod) int32 {
	t.Helper()
	n := int32(1)
	if st := pluginContainer(before); st != nil {
		n = st.RestartCount + 1
	}
	return pluginContainer(waitPluginReady(t, before.UID, n)).RestartCount
}

// onePluginPID is the host PID of the fault node's only plugin process.
func onePluginPID(t *testing.T) int {
	t.Helper()
	var pids []int
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		var err error
		pids, err = realCluster.PluginPIDs(faultNode)
		return err == nil && len(pids) == 1, nil
	})
	if err != nil {
		t.Fatalf("plugin processes of %s: %v, want one", faultNode, pids)
	}
	return pids[0]
}
