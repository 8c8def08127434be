//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpudra/gpudra/internal/plugin/mpspod"
	"github.com/gpudra/gpudra/internal/plugin/sharing"
	"github.com/gpudra/gpudra/test/fakegpu"
)

// compatMPSGroups: an NVIDIA-format claim whose two requests' MPS settings
// differ (20% and 50% of the threads) gets an MPS control daemon per
// configuration group, as NVIDIA's driver runs one per configuration: two
// daemon Pods, each container reaching its own group's daemon (its pipe
// directory, its percentage), each daemon told its own percentage for its
// own GPU; all of it gone once the claim is deleted.
func compatMPSGroups(t *testing.T, ns string) {
	ctx := context.Background()
	applyYAML(t, ns, nvidiaManifest(t, "mps-groups.yaml"))
	waitRunning(t, ns, "mps-groups")
	p := pod(t, ns, "mps-groups")
	node := p.Spec.NodeName
	claim, err := client.ResourceV1().ResourceClaims(ns).Get(ctx, "mps-groups", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	uid := string(claim.UID)
	claimDir := filepath.Join(pluginDir(node), "mps", uid)
	plugin, err := realCluster.PluginPod(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	// Allocation order is request order: "low" is group 0 (the claim's
	// directory and Pod name), "high" group 1.
	groups := []struct {
		ctr, pct, dir, pod string
	}{
		{"low", "20", claimDir, mpspod.Name(uid, 0)},
		{"high", "50", filepath.Join(claimDir, "group-1"), mpspod.Name(uid, 1)},
	}
	var pids []int
	for _, g := range groups {
		if _, err := client.CoreV1().Pods(plugin.Namespace).Get(ctx, g.pod, metav1.GetOptions{}); err != nil {
			t.Errorf("MPS control daemon Pod %s of group %s: %v", g.pod, g.ctr, err)
		}
		seen := containerGPUs(t, ns, "mps-groups", g.ctr)
		if len(seen) != 1 {
			t.Fatalf("container %s sees %v, want its request's one GPU", g.ctr, seen)
		}
		inj := injection(t, p, g.ctr)
		if got := getenv(t, inj, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"); got != g.pct {
			t.Errorf("%s: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%q, want %q", g.ctr, got, g.pct)
		}
		pipe := filepath.Join(g.dir, "pipe")
		if !slices.ContainsFunc(inj.Mounts, func(m hostMount) bool { return m.Destination == sharing.ContainerPipeDir && m.Source == pipe }) {
			t.Errorf("%s: no mount of its group's pipe directory %s; mounts: %+v", g.ctr, pipe, inj.Mounts)
		}
		st := waitDaemonState(t, filepath.Join(g.dir, "log"), func(s *fakegpu.MPSState) bool { return s.ActiveThreadPercentage > 0 })
		if strconv.Itoa(st.ActiveThreadPercentage) != g.pct || !slices.Equal(st.Devices, []string{seen[0].UUID}) {
			t.Errorf("daemon of group %s: state %+v, want %s%% threads on %s", g.ctr, st, g.pct, seen[0].UUID)
		}
		b, err := os.ReadFile(filepath.Join(pipe, sharing.ControlPIDFile))
		if err != nil {
			t.Fatalf("daemon PID of group %s: %v", g.ctr, err)
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		pids = append(pids, pid)
	}

	deletePod(t, ns, "mps-groups")
	deleteClaim(t, ns, "mps-groups")
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		for _, g := range groups {
			if _, err := client.CoreV1().Pods(plugin.Namespace).Get(ctx, g.pod, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		_, dirErr := os.Stat(claimDir)
		return os.IsNotExist(dirErr) && !slices.ContainsFunc(pids, pidAlive), nil
	})
	if err != nil {
		t.Errorf("after the claim's deletion its MPS daemon Pods, directory %s and processes %v must be gone: %v", claimDir, pids, err)
	}
}
