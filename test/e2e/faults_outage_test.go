//go:build e2e && faults

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
)

// testCorruptCheckpoint truncates the record of a running pod's claim while
// the plugin is stopped: the plugin must refuse to start and name the file
// (README, "Recovering a corrupted checkpoint"); with the file restored, as
// the documented recovery says, it starts and the pod's claim is intact.
func testCorruptCheckpoint(t *testing.T, ns string) {
	uid := runOnePod(t, ns, "corrupt")
	record := filepath.Join(checkpointDir(faultNode), uid+".json")
	good, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	clusterCmd(t, "stop-plugin", faultNode)
	restored := false
	t.Cleanup(func() {
		if !restored {
			_ = os.WriteFile(record, good, 0o600)
		}
		clusterCmd(t, "start-plugin", faultNode)
	})
	if err := os.WriteFile(record, good[:len(good)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	// Run the plugin as the cluster does, in the foreground: it must exit.
	args := pluginCommand(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("the plugin started over a truncated record (err %v):\n%s", err, tail(string(out), 20))
	}
	if !strings.Contains(string(out), record) {
		t.Fatalf("the start-up error does not name the damaged file %s:\n%s", record, tail(string(out), 20))
	}
	t.Logf("refused to start: %s", lastLine(string(out), record))
	if err := os.WriteFile(record, good, 0o600); err != nil {
		t.Fatal(err)
	}
	restored = true
	clusterCmd(t, "start-plugin", faultNode)
	if _, err := os.Stat(specPath(faultNode, uid)); err != nil {
		t.Fatalf("CDI spec of the running pod lost: %v", err)
	}
	assertCheckpointMatchesAPI(t)
	deleteAndCheckGone(t, ns, "corrupt", uid)
}

// testAPIServerOutage stops kube-apiserver for GPUDRA_FAULT_OUTAGE (30s):
// the plugin process must stay up and keep serving dra.sock, and once the
// API server is back it must prepare a new pod's claim without a restart.
func testAPIServerOutage(t *testing.T, ns string) {
	before := pluginPID()
	if before == 0 {
		t.Fatal("plugin not running")
	}
	outage := 30 * time.Second
	if d, err := time.ParseDuration(os.Getenv("GPUDRA_FAULT_OUTAGE")); err == nil {
		outage = d
	}
	clusterCmd(t, "stop-apiserver")
	started := false
	t.Cleanup(func() {
		if !started {
			clusterCmd(t, "start-apiserver")
		}
	})
	socket := filepath.Join(kubeletDir(faultNode), "plugins", driver, "dra.sock")
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	dra := drapb.NewDRAPluginClient(conn)
	deadline := time.Now().Add(outage)
	for time.Now().Before(deadline) {
		// Unpreparing an unknown claim needs no API: it shows the plugin serves.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: []*drapb.Claim{
			{Namespace: ns, Name: "none", Uid: "00000000-0000-0000-0000-000000000001"}}})
		cancel()
		if err != nil {
			t.Fatalf("dra.sock stopped serving during the API outage: %v", err)
		}
		if pluginPID() != before {
			t.Fatal("the plugin exited during the API outage")
		}
		time.Sleep(2 * time.Second)
	}
	clusterCmd(t, "start-apiserver")
	started = true
	uid := runOnePod(t, ns, "after-outage")
	if after := pluginPID(); after != before {
		t.Fatalf("the plugin was restarted (pid %d, now %d)", before, after)
	}
	deleteAndCheckGone(t, ns, "after-outage", uid)
}

// testRollingUpdate replaces the node's plugin the way a DaemonSet with
// maxSurge does: the old instance (started with a pod UID) keeps serving
// while a new one with another pod UID starts and registers, then the old
// one gets SIGTERM. Pods are created and deleted, eight at a time, across
// the handover; not one prepare may fail.
func testRollingUpdate(t *testing.T, ns string) {
	restartWithEnv(t, "POD_UID=old")
	t.Cleanup(func() {
		clusterCmd(t, "stop-plugin", faultNode)
		restartWithEnv(t)
	})
	churnRound(t, ns, "roll-0", 8) // the old instance alone

	args := pluginCommand(t)
	// A new plugin pod has its own network namespace (the chart's DaemonSet
	// does not use the host network); as a host process here it needs a
	// metrics port of its own.
	for i := range args {
		if args[i] == "--metrics-address" && i+1 < len(args) {
			args[i+1] = "127.0.0.1:0"
		} else if strings.HasPrefix(args[i], "--metrics-address=") {
			args[i] = "--metrics-address=127.0.0.1:0"
		}
	}
	newUID := "new" // short: Unix socket paths have at most 107 bytes
	logPath := filepath.Join(t.TempDir(), "plugin-new.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	surge := exec.Command(args[0], args[1:]...)
	surge.Env = append(pluginEnv("", ""), "POD_UID="+newUID)
	// The command is unshare with the plugin as its child, in a process
	// group of their own: killing the group ends both.
	surge.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	surge.Stdout, surge.Stderr = logFile, logFile
	handover := make(chan error, 1)
	go func() {
		if err := surge.Start(); err != nil {
			handover <- err
			return
		}
		// The new instance registers under its own socket name; once the
		// kubelet has it, the old instance goes.
		regSocket := driver + "-" + newUID + "-reg.sock"
		err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			log, _ := os.ReadFile(filepath.Join(clusterDir, "logs", "kubelet-"+faultNode+".log"))
			return strings.Contains(string(log), regSocket) && strings.Contains(string(log), `"OperationExecutor.RegisterPlugin started"`), nil
		})
		if err != nil {
			log, _ := os.ReadFile(logPath)
			handover <- fmt.Errorf("the kubelet never registered the new instance (%s); its log:\n%s", regSocket, tail(string(log), 20))
			return
		}
		time.Sleep(time.Second)
		out, err := exec.Command(clusterSh, "stop-plugin", faultNode).CombinedOutput()
		if err != nil {
			err = fmt.Errorf("stop the old instance: %w\n%s", err, out)
		}
		handover <- err
	}()
	t.Cleanup(func() {
		if surge.Process != nil {
			_ = syscall.Kill(-surge.Process.Pid, syscall.SIGKILL)
		}
		_ = surge.Wait()
		_ = logFile.Close()
	})
	churnRound(t, ns, "roll-1", 8) // across the handover
	if err := <-handover; err != nil {
		t.Fatal(err)
	}
	churnRound(t, ns, "roll-2", 8) // the new instance alone
	if log, _ := os.ReadFile(logPath); strings.Count(string(log), `"Prepared claim"`) < 8 {
		t.Errorf("the new instance prepared fewer than the last round's 8 claims; its log:\n%s", tail(string(log), 30))
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

// restartWithEnv kill -9s the node's plugin and starts the normal build with
// extra environment (e.g. POD_UID).
func restartWithEnv(t *testing.T, env ...string) {
	t.Helper()
	cmd := exec.Command(clusterSh, "restart-plugin", faultNode)
	cmd.Env = append(slices.DeleteFunc(pluginEnv("", ""), func(kv string) bool { return strings.HasPrefix(kv, "POD_UID=") }), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("restart-plugin: %v\n%s", err, out)
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

// pluginCommand is the node plugin's command line as cluster.sh logged it.
func pluginCommand(t *testing.T) []string {
	f, err := os.Open(filepath.Join(clusterDir, "logs", "plugin-"+faultNode+".log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var last string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "=== command: "); ok {
			last = rest
		}
	}
	if last == "" {
		t.Fatal("no plugin command line in the plugin log")
	}
	// cluster.sh logs it with printf %q: paths have no spaces, and a
	// backslash escapes the next character (e.g. the commas of
	// --health-ignored-xids=13,31,...).
	args := strings.Fields(last)
	for i, a := range args {
		var b strings.Builder
		for j := 0; j < len(a); j++ {
			if a[j] == '\\' && j+1 < len(a) {
				j++
			}
			b.WriteByte(a[j])
		}
		args[i] = b.String()
	}
	return args
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
