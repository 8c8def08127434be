//go:build e2e && faults

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/gpudra/gpudra/test/e2elogs"
)

// testCorruptCheckpoint truncates the record of a running pod's claim and
// kills the plugin (kill -9, as the OOM killer would): the container the
// kubelet starts again must refuse to start and name the file (docs/reliability.md,
// "Recovering a corrupted checkpoint"); with the file restored, as the
// documented recovery says, the kubelet's next restart starts it and the
// pod's claim is intact.
func testCorruptCheckpoint(t *testing.T, ns string) {
	p := freshPluginPod(t)
	uid := runOnePod(t, ns, "corrupt")
	record := filepath.Join(checkpointDir(faultNode), uid+".json")
	good, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	restored := false
	t.Cleanup(func() {
		if !restored {
			_ = os.WriteFile(record, good, 0o600)
		}
	})
	if err := os.WriteFile(record, good[:len(good)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(onePluginPID(t), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The restarted container must exit with an error that names the file
	// as the plugin sees it (the node's path).
	inPod := nodePath(record)
	var log string
	err = wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		cur, err := realCluster.PluginPod(ctx, faultNode)
		if err != nil || cur.UID != p.UID {
			return false, err
		}
		st := pluginContainer(cur)
		if st == nil || st.LastTerminationState.Terminated == nil || st.LastTerminationState.Terminated.ExitCode == 137 {
			return false, nil // not yet restarted, or the last end is our kill
		}
		raw, err := client.CoreV1().Pods(cur.Namespace).GetLogs(cur.Name, &v1.PodLogOptions{Container: "plugin", Previous: true}).DoRaw(ctx)
		log = string(raw)
		return err == nil && strings.Contains(log, inPod), nil
	})
	if err != nil {
		t.Fatalf("the plugin did not refuse to start over the truncated %s (%v); its last log:\n%s", inPod, err, e2elogs.Tail(log, 20))
	}
	t.Logf("refused to start: %s", lastLine(log, inPod))
	if err := os.WriteFile(record, good, 0o600); err != nil {
		t.Fatal(err)
	}
	restored = true
	// The kubelet's next restart (after its back-off) starts it.
	t.Logf("restored; the kubelet restarted it (%d restarts)", pluginContainer(waitPluginReady(t, p.UID, 2)).RestartCount)
	if _, err := os.Stat(specPath(faultNode, uid)); err != nil {
		t.Fatalf("CDI spec of the running pod lost: %v", err)
	}
	assertCheckpointMatchesAPI(t)
	deleteAndCheckGone(t, ns, "corrupt", uid)
}

// testAPIServerOutage stops kube-apiserver for GPUDRA_FAULT_OUTAGE (30s):
// the plugin process must stay up (same PID, no container restart) and
// keep serving dra.sock, and once the API server is back it must prepare a
// new pod's claim without a restart.
func testAPIServerOutage(t *testing.T, ns string) {
	p := freshPluginPod(t)
	restarts := pluginContainer(p).RestartCount
	pid := onePluginPID(t)
	outage := 30 * time.Second
	if d, err := time.ParseDuration(os.Getenv("GPUDRA_FAULT_OUTAGE")); err == nil {
		outage = d
	}
	dra := servingSocket(t)
	if err := realCluster.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	started := false
	t.Cleanup(func() {
		if !started {
			if err := realCluster.StartAPIServer(context.Background()); err != nil {
				t.Errorf("start the API server again: %v", err)
			}
		}
	})
	deadline := time.Now().Add(outage)
	for time.Now().Before(deadline) {
		// Unpreparing an unknown claim needs no API: it shows the plugin serves.
		if err := unprepareUnknown(dra, ns); err != nil {
			t.Fatalf("dra.sock stopped serving during the API outage: %v", err)
		}
		if pids, err := realCluster.PluginPIDs(faultNode); err != nil || !slices.Equal(pids, []int{pid}) {
			t.Fatalf("the plugin process %d exited during the API outage (now: %v, %v)", pid, pids, err)
		}
		time.Sleep(2 * time.Second)
	}
	if err := realCluster.StartAPIServer(context.Background()); err != nil {
		t.Fatal(err)
	}
	started = true
	uid := runOnePod(t, ns, "after-outage")
	if pids, _ := realCluster.PluginPIDs(faultNode); !slices.Equal(pids, []int{pid}) {
		t.Fatalf("the plugin was restarted (pid %d, now %v)", pid, pids)
	}
	if now := pluginContainer(waitPluginReady(t, p.UID, 0)).RestartCount; now != restarts {
		t.Fatalf("the plugin container was restarted during the outage (%d restarts, before %d)", now, restarts)
	}
	deleteAndCheckGone(t, ns, "after-outage", uid)
}

// servingSocket returns a client of the fault node's plugin socket that
// answers (a killed pod's socket file may be left next to it). The host's
// path of a node's socket is longer than a Unix socket address may be, so
// it is dialled through a short symbolic link.
func servingSocket(t *testing.T) drapb.DRAPluginClient {
	t.Helper()
	socks, _ := filepath.Glob(filepath.Join(pluginDir(faultNode), "dra*.sock"))
	short, err := os.MkdirTemp("", "dra")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(short) })
	var errs []error
	for i, s := range socks {
		link := filepath.Join(short, fmt.Sprintf("%d.sock", i))
		if err := os.Symlink(s, link); err != nil {
			t.Fatal(err)
		}
		conn, err := grpc.NewClient("unix://"+link, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		dra := drapb.NewDRAPluginClient(conn)
		if err := unprepareUnknown(dra, "default"); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", filepath.Base(s), err))
			_ = conn.Close()
			continue
		}
		t.Cleanup(func() { _ = conn.Close() })
		return dra
	}
	t.Fatalf("none of the sockets %v of %s answers: %v", socks, faultNode, errs)
	return nil
}

func unprepareUnknown(dra drapb.DRAPluginClient, ns string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: []*drapb.Claim{
		{Namespace: ns, Name: "none", Uid: "00000000-0000-0000-0000-000000000001"}}})
	return err
}

// testRollingUpdate rolls the plugin DaemonSet with helm upgrade (a new pod
// annotation), which with the chart's maxSurge starts the new pod beside
// the old one, then stops the old one. Pods are created and deleted, eight
// at a time, before, across and after the handover: not one prepare may
// fail, and the new pod serves the last round.
func testRollingUpdate(t *testing.T, ns string) {
	old := freshPluginPod(t)
	churnRound(t, ns, "roll-0", 8) // the old pod alone
	handover := make(chan error, 1)
	start := time.Now()
	go func() {
		rollout := fmt.Sprintf("kubeletPlugin.podAnnotations.e2e\\.gpudra\\.io/rollout=f%d", time.Now().UnixNano())
		handover <- realCluster.InstallDriver(context.Background(), rollout)
	}()
	churnRound(t, ns, "roll-1", 8) // across the handover
	if err := <-handover; err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
	cur := waitPluginReady(t, "", 0)
	if cur.UID == old.UID {
		t.Fatal("the plugin pod was not replaced by the upgrade")
	}
	t.Logf("rolled out in %v: %s replaced %s", time.Since(start).Round(time.Millisecond), cur.Name, old.Name)
	churnRound(t, ns, "roll-2", 8) // the new pod alone
	raw, err := client.CoreV1().Pods(cur.Namespace).GetLogs(cur.Name, &v1.PodLogOptions{Container: "plugin"}).DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(raw), `"Prepared claim"`); n < 8 {
		t.Errorf("the new pod prepared %d claims, fewer than the last round's 8; its log:\n%s", n, e2elogs.Tail(string(raw), 30))
	}
	events, err := client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=FailedPrepareDynamicResources"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if strings.HasPrefix(e.InvolvedObject.Name, "roll-") {
			t.Errorf("failed prepare during the rolling update: %s: %s", e.InvolvedObject.Name, e.Message)
		}
	}
}

// runOnePod runs a pod with a one-GPU claim on the fault node and returns
// the claim's UID.
func runOnePod(t *testing.T, ns, name string) string {
	t.Helper()
	if _, err := client.CoreV1().Pods(ns).Create(context.Background(), benchPod(name, true), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAllRunning(t, ns, []string{name}, 3*time.Minute)
	assertSeesAllocation(t, ns, name, "c")
	claim, err := client.ResourceV1().ResourceClaims(ns).Get(context.Background(), podClaimNames(pod(t, ns, name))[0], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(claim.UID)
}

func deleteAndCheckGone(t *testing.T, ns, name, uid string) {
	t.Helper()
	if err := client.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPodGone(t, ns, name, 3*time.Minute)
	fileGone(t, specPath(faultNode, uid))
	fileGone(t, filepath.Join(checkpointDir(faultNode), uid+".json"))
}

func lastLine(s, containing string) string {
	lines := strings.Split(s, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], containing) {
			return strings.TrimSpace(lines[i])
		}
	}
	return ""
}
