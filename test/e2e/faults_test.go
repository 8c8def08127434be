//go:build e2e && faults

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpudra/gpudra/internal/plugin/checkpoint"
	"github.com/gpudra/gpudra/internal/plugin/failpoint"
	"github.com/gpudra/gpudra/test/e2elogs"
)

// The fault suite (make test-faults; build tags e2e,faults; the containerd
// cluster) switches the driver to the failpoints image
// (ghcr.io/gpudra/gpudra:failpoints, make images-failpoints) with a helm
// upgrade, and arms one failpoint of gpu-h100's plugin pod at a time by
// writing a file on the plugin's hostPath (internal/plugin/failpoint, FileEnvVar) while
// pods with one-GPU claims are created and deleted, eight at a time. The
// failpoint kills the plugin (SIGKILL, or the exit of a container's PID 1)
// and removes the file first, so the container the kubelet restarts runs
// unarmed. After every round it checks:
//
//   - every pod that reached Running sees exactly the GPU allocated to it;
//   - no GPU is held by two claims in the checkpoint;
//   - with all pods of a round Running, the checkpoint's completed records
//     are exactly the node's claims in the API, with the same devices;
//   - once a round's pods are gone, none of their claims has a CDI spec or a
//     checkpoint record left.
//
// GPUDRA_FAULT_PODS sets the pods per failpoint (default 48, at least 16:
// about 200 claims over the four failpoints).
const faultNode = "gpu-h100"

func TestFaults(t *testing.T) {
	ns := namespace(t)
	oneGPUTemplate(t, ns)
	pods := 48
	if v, err := strconv.Atoi(os.Getenv("GPUDRA_FAULT_PODS")); err == nil && v >= 16 {
		pods = v
	}
	t.Run("failpoints", func(t *testing.T) {
		useFailpointsImage(t)
		for _, fp := range []struct{ short, name, action string }{
			// Each kill lands in the second round (9th to 16th claim), while
			// eight claims are prepared or unprepared at once.
			{"started", failpoint.PrepareStarted, "crash-after(11)"},
			{"cdi-written", failpoint.PrepareCDIWritten, "crash-after(13)"},
			{"completed", failpoint.PrepareCompleted, "crash-after(15)"},
			{"unprepare", failpoint.UnprepareCDIRemoved, "crash-after(12)"},
		} {
			t.Run(fp.short, func(t *testing.T) {
				crashDuringChurn(t, ns, fp.short, fp.name+"="+fp.action, pods)
			})
		}
		t.Run("rollback-past-deadline", func(t *testing.T) { testRollbackPastDeadline(t, ns) })
		t.Run("mps-crash-in-unprepare", testMPSDaemonGoneAfterCrashInUnprepare)
	})
	t.Run("corrupt-checkpoint", func(t *testing.T) { testCorruptCheckpoint(t, ns) })
	t.Run("apiserver-outage", func(t *testing.T) { testAPIServerOutage(t, ns) })
	t.Run("rolling-update", func(t *testing.T) { testRollingUpdate(t, ns) })
}

func oneGPUTemplate(t *testing.T, ns string) {
	rct := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "one-gpu"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.gpudra.io"}}},
		}}},
	}
	if _, err := client.ResourceV1().ResourceClaimTemplates(ns).Create(context.Background(), rct, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// crashDuringChurn runs rounds of 8 pods on the node with the failpoint
// armed; the kubelet restarts the plugin container it kills.
func crashDuringChurn(t *testing.T, ns, short, spec string, pods int) {
	before := freshPluginPod(t)
	pid := onePluginPID(t)
	ctx, cancel := context.WithCancel(context.Background())
	crashed := make(chan time.Duration, 1)
	started := time.Now()
	arm(t, spec)
	go func() {
		defer close(crashed)
		for ctx.Err() == nil {
			if pids, err := realCluster.PluginPIDs(faultNode); err == nil && !slices.Contains(pids, pid) {
				crashed <- time.Since(started)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	defer cancel()
	for i := 0; i < pods; i += 8 {
		n := min(8, pods-i)
		churnRound(t, ns, fmt.Sprintf("%s-%d", short, i/8), n)
		if t.Failed() {
			return
		}
	}
	cancel()
	at, ok := <-crashed
	if !ok {
		t.Fatalf("the plugin never reached failpoint %s", spec)
	}
	fileGone(t, armFile())
	restarts := pluginRestarted(t, before)
	t.Logf("plugin killed at %s after %v, container restarted by the kubelet (%d restarts); %d pods ran",
		spec, at.Round(time.Millisecond), restarts, pods)
}

// churnRound creates n pods, waits until all run, checks the invariants,
// deletes them and checks that nothing of their claims is left.
func churnRound(t *testing.T, ns, prefix string, n int) {
	t.Helper()
	ctx := context.Background()
	var names []string
	for j := 0; j < n; j++ {
		p := benchPod(fmt.Sprintf("%s-%d", prefix, j), true)
		if _, err := client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, p.Name)
	}
	waitAllRunning(t, ns, names, 4*time.Minute)
	uids := map[string]bool{}
	for _, name := range names {
		assertSeesAllocation(t, ns, name, "c")
		for _, c := range podClaimNames(pod(t, ns, name)) {
			claim, err := client.ResourceV1().ResourceClaims(ns).Get(ctx, c, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			uids[string(claim.UID)] = true
		}
	}
	assertCheckpointMatchesAPI(t)
	for _, name := range names {
		if err := client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range names {
		waitPodGone(t, ns, name, 4*time.Minute)
	}
	for uid := range uids {
		fileGone(t, specPath(faultNode, uid))
		fileGone(t, filepath.Join(checkpointDir(faultNode), uid+".json"))
	}
}

func waitAllRunning(t *testing.T, ns string, names []string, timeout time.Duration) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		l, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		running := 0
		var pending []string
		for _, p := range l.Items {
			if slices.Contains(names, p.Name) {
				if p.Status.Phase == v1.PodRunning {
					running++
				} else {
					pending = append(pending, p.Name+"="+string(p.Status.Phase))
				}
			}
		}
		last = strings.Join(pending, " ")
		return running == len(names), nil
	})
	if err != nil {
		events, _ := kubectl("-n", ns, "get", "events", "--sort-by=.lastTimestamp")
		t.Fatalf("pods not Running within %v: %s\n%s", timeout, last, e2elogs.Tail(events, 40))
	}
}

// records reads the node's checkpoint records of this boot as the plugin
// wrote them (without the store, which would tidy the directory).
func records(t *testing.T) []checkpoint.ClaimRecord {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(checkpointDir(faultNode), "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	var out []checkpoint.ClaimRecord
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var env struct {
			Data checkpoint.ClaimRecord `json:"data"`
		}
		if err := json.Unmarshal(raw, &env); err != nil {
			t.Fatalf("checkpoint record %s: %v", f, err)
		}
		out = append(out, env.Data)
	}
	return out
}

// assertCheckpointMatchesAPI: at rest, the completed records are exactly the
// claims allocated on the node and reserved by a pod, device for device, and
// no device appears in two records.
func assertCheckpointMatchesAPI(t *testing.T) {
	t.Helper()
	want := map[string][]string{} // claim UID → devices in the API
	claims, err := client.ResourceV1().ResourceClaims("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range claims.Items {
		if c.Status.Allocation == nil || len(c.Status.ReservedFor) == 0 {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver == driver && r.Pool == faultNode {
				want[string(c.UID)] = append(want[string(c.UID)], r.Device)
			}
		}
	}
	got := map[string][]string{}
	holder := map[string]string{}
	for _, r := range records(t) {
		if r.State != checkpoint.PrepareCompleted {
			t.Errorf("record of claim %s/%s is %s with every pod at rest", r.Namespace, r.Name, r.State)
		}
		for _, d := range r.Devices {
			if other, ok := holder[d.Name]; ok {
				t.Errorf("GPU %s is held by claims %s and %s", d.Name, other, r.UID)
			}
			holder[d.Name] = r.UID
			got[r.UID] = append(got[r.UID], d.Name)
		}
	}
	for uid := range want {
		slices.Sort(want[uid])
		slices.Sort(got[uid])
		if !slices.Equal(want[uid], got[uid]) {
			t.Errorf("claim %s: API allocates %v on %s, checkpoint holds %v", uid, want[uid], faultNode, got[uid])
		}
	}
	for uid := range got {
		if _, ok := want[uid]; !ok {
			t.Errorf("checkpoint holds claim %s (%v), which the API does not allocate on %s", uid, got[uid], faultNode)
		}
	}
}
