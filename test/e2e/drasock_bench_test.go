//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/gpudra/gpudra/test/fakedriver"
	"github.com/gpudra/gpudra/test/procmem"
)

// BenchmarkDRASock calls a plugin's dra.sock with the kubelet's own gRPC API,
// for claims that exist and are allocated in the API server, so each prepare
// includes the claim GET the kubelet-plugin helper performs. Claims are
// allocated by writing their status as the scheduler would, without pods.
// The benchmark does not use a node's plugin pod: its dra.sock belongs to
// that node's kubelet (claims prepared behind its back would be in the
// plugin's checkpoint but not in the kubelet's), and its process is shared
// with the cluster's own work, which the probe would count. It starts its own
// plugin process on the host instead (the shipped binary and defaults,
// simulated dgx-h100 on a fake driver root, pool "gpu-bench" of a Node
// object without a kubelet) against the local cluster's API server, with
// the admin kubeconfig; the probe reads that process's CPU time and memory.
//
//	make bench-drasock
func BenchmarkDRASock(b *testing.B) {
	const node = "gpu-bench"
	ns := benchNamespace(b)
	fakeNode(b, node)
	// Memory is read with the binary and the NVML library read from disk,
	// as after a node's start: what a freshly written file has in the page
	// cache (large folios) would be mapped whole and counted in its RSS.
	targets := []*drasockTarget{newDRASockTarget(b, ns, "", startBenchPlugin(b, node, true), driver, "gpu.gpudra.io")}
	// The reference driver (drasock_reference_test.go), when given, on a
	// node of its own; each case alternates between the two in blocks.
	const refNode = "ref-bench"
	if os.Getenv("REFERENCE_PLUGIN") != "" {
		fakeNode(b, refNode)
		targets = append(targets, newDRASockTarget(b, ns, "ref-", startReferencePlugin(b, refNode), referenceDriver, referenceDriver))
	}
	time.Sleep(2 * time.Second) // let start-up work settle before reading idle memory
	for _, t := range targets {
		t.readIdle(b)
	}
	churn := fileChurnMicros(b, targets[0].plugin.dataDir, 200)
	name := func(t *drasockTarget, c string) string {
		if t.prefix == "" {
			return c
		}
		return referenceName(c)
	}

	// Each case runs on every driver in interleaved blocks
	// (drasock_interleave_test.go), from the first driver's sub-benchmark;
	// the others' report what was measured there.
	for _, c := range []struct {
		name   string
		block  blockFunc
		blocks int // per driver
		report func(r *caseRun, b *testing.B)
	}{
		{"1-gpu-claim", sequentialCycles(func(t *drasockTarget) []*drapb.Claim { return t.single[:1] }), 10, (*caseRun).reportLatencies},
		{"8-gpu-claim", sequentialCycles(func(t *drasockTarget) []*drapb.Claim { return []*drapb.Claim{t.all} }), 10, (*caseRun).reportLatencies},
		{"8-claims-one-call", sequentialCycles(func(t *drasockTarget) []*drapb.Claim { return t.single }), 10, (*caseRun).reportLatencies},
		// Fewer, longer blocks: the callers start and finish each block
		// together, which a short block would mostly measure.
		{"8-parallel-callers", parallelCallers, 2, (*caseRun).reportThroughput},
	} {
		var runs []*caseRun
		for i, t := range targets {
			b.Run(name(t, c.name), func(b *testing.B) {
				// b.N is 1 on a sub-benchmark's first call; a driver whose
				// sub-benchmark runs alone (-bench) measures for itself.
				if i == 0 || runs == nil || runs[i].n < b.N {
					runs = runInterleaved(b, targets, b.N, c.blocks, c.block)
				}
				c.report(runs[i], b)
			})
		}
	}
	for _, t := range targets {
		b.Run(name(t, "plugin-memory"), func(b *testing.B) {
			b.ReportMetric(t.idle, "rss-idle-MiB")
			// Anonymous memory only: heap and stacks, without the binary's
			// mapped pages (file-backed, shared, reclaimable).
			b.ReportMetric(t.idleAnon, "rss-anon-idle-MiB")
			b.ReportMetric(procMiB(b, t.pid, "VmHWM"), "rss-peak-MiB")
			// The same idle memory split by kind (/proc/<pid>/smaps_rollup):
			// proportional (pages shared with other processes counted by share),
			// and file-backed (the binary's and libraries' pages).
			b.ReportMetric(t.idleMem["Pss"], "pss-idle-MiB")
			b.ReportMetric(t.idleMem["Pss_File"], "pss-file-idle-MiB")
			b.ReportMetric(t.idleMem["Pss_Anon"], "pss-anon-idle-MiB")
			// Less what the simulated libnvidia-ml adds to a process, for the
			// figure a node's C library has instead (the reference loads none).
			b.ReportMetric(t.idle-t.nvmlSim, "rss-idle-less-nvml-sim-MiB")
			if t.prefix == "" {
				// The simulated libnvidia-ml's own mapped pages, which the
				// reference (no NVML) and a real node's C library do not
				// have; its Go runtime's heap is in the anonymous figure.
				b.ReportMetric(t.nvmlLib, "rss-nvml-lib-idle-MiB")
				b.ReportMetric(t.nvmlSim, "rss-nvml-sim-MiB")
				b.ReportMetric(t.nvmlSimAnon, "rss-anon-nvml-sim-MiB")
				b.ReportMetric(churn, "fs-create-remove-µs")
			}
		})
	}
}

// drasockTarget is one plugin under BenchmarkDRASock: its dra.sock client,
// 8 one-GPU claims (gpu-0..gpu-7) and one claim with all 8 GPUs (only ever
// prepared alone), allocated in its pool.
type drasockTarget struct {
	prefix   string // of its claims' names: "" for gpudra
	plugin   *benchPlugin
	dra      drapb.DRAPluginClient
	single   []*drapb.Claim
	all      *drapb.Claim
	probe    *benchProbe
	pid      int
	idle     float64 // VmRSS, MiB
	idleAnon float64 // RssAnon, MiB
	idleMem  map[string]float64
	nvmlLib  float64 // RSS of the libnvidia-ml mappings, MiB
	// What the simulated libnvidia-ml adds to an idle process (MiB of RSS
	// and anonymous RSS; nvmlLibFootprint), 0 for a plugin without one.
	nvmlSim, nvmlSimAnon float64
}

func newDRASockTarget(b *testing.B, ns, prefix string, plugin *benchPlugin, driverName, class string) *drasockTarget {
	conn, err := grpc.NewClient("unix://"+plugin.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	t := &drasockTarget{prefix: prefix, plugin: plugin, dra: drapb.NewDRAPluginClient(conn), single: make([]*drapb.Claim, 8),
		pid: plugin.cmd.Process.Pid}
	for i := range t.single {
		t.single[i] = allocatedClaimOf(b, ns, fmt.Sprintf("%sone-%d", prefix, i), driverName, class, plugin.node, i)
	}
	t.all = allocatedClaimOf(b, ns, prefix+"eight", driverName, class, plugin.node, 0, 1, 2, 3, 4, 5, 6, 7)
	t.probe = newBenchProbe(b, plugin)
	return t
}

func (t *drasockTarget) readIdle(b *testing.B) {
	t.idle, t.idleAnon = procMiB(b, t.pid, "VmRSS"), procMiB(b, t.pid, "RssAnon")
	t.idleMem = smapsRollup(b, t.pid)
	t.nvmlLib = mappedMiB(b, t.pid, "libnvidia-ml.so")
	if t.plugin.nvmlLib != "" {
		t.nvmlSim, t.nvmlSimAnon = nvmlLibFootprint(b, t.plugin.nvmlLib)
	}
}

// cycle prepares and then unprepares claims in one call each.
func cycle(dra drapb.DRAPluginClient, claims ...*drapb.Claim) (prep, unprep time.Duration, err error) {
	start := time.Now()
	resp, err := dra.NodePrepareResources(context.Background(), &drapb.NodePrepareResourcesRequest{Claims: claims})
	if err != nil {
		return 0, 0, err
	}
	for uid, r := range resp.Claims {
		if r.Error != "" {
			return 0, 0, fmt.Errorf("prepare %s: %s", uid, r.Error)
		}
	}
	prep = time.Since(start)
	start = time.Now()
	uresp, err := dra.NodeUnprepareResources(context.Background(), &drapb.NodeUnprepareResourcesRequest{Claims: claims})
	if err != nil {
		return 0, 0, err
	}
	for uid, r := range uresp.Claims {
		if r.Error != "" {
			return 0, 0, fmt.Errorf("unprepare %s: %s", uid, r.Error)
		}
	}
	return prep, time.Since(start), nil
}

// benchPlugin is a gpu-kubelet-plugin process started by a benchmark.
type benchPlugin struct {
	cmd     *exec.Cmd
	node    string
	socket  string
	log     string
	dataDir string // checkpoint, locks, socket
	nvmlLib string // the simulated libnvidia-ml in its fake driver root ("" without one)
	// metricsURL is its /metrics (--metrics-address, on as the chart has it).
	metricsURL string
	started    time.Time // just before exec
	served     time.Time // dra.sock seen
	stopped    bool
}

// benchGPUArgs gives the bench plugin its simulated DGX H100: a fake driver
// root (the real NVML/nvcdi path, as shipped), or with
// GPUDRA_BENCH_SIMULATE=<profile> the --simulate flag of plugin builds from
// before the fake driver root, for an A/B comparison with GPUDRA_PLUGIN_BIN.
func benchGPUArgs(b *testing.B, dir, node string) []string {
	if p := os.Getenv("GPUDRA_BENCH_SIMULATE"); p != "" {
		return []string{"--simulate", p}
	}
	root := filepath.Join(dir, "driver-root")
	if err := fakedriver.Generate(fakedriver.Options{Dir: root, Profile: "dgx-h100", Node: node,
		NVMLLibrary: filepath.Join(repoRoot, "_output", "lib", "libnvidia-ml-sim.so"),
		ToolsDir:    filepath.Join(repoRoot, "_output", "bin")}); err != nil {
		b.Fatal(err)
	}
	return []string{"--nvidia-driver-root", root}
}

// startBenchPlugin runs a gpu-kubelet-plugin process for pool node with the
// admin kubeconfig (simulated dgx-h100 on a fake driver root, shipped defaults) and waits until it
// serves dra.sock. A Node object of that name makes the slice publishable.
//
// GPUDRA_BENCH_DIR=<dir> puts its directories (checkpoint, locks, socket)
// under dir instead of the test's temporary directory, e.g. on another
// filesystem to see what the file system costs.
//
// coldFiles drops the binary's and the NVML library's pages from the page
// cache first (see dropPageCache).
func startBenchPlugin(b *testing.B, node string, coldFiles bool) *benchPlugin {
	dir := b.TempDir()
	if base := os.Getenv("GPUDRA_BENCH_DIR"); base != "" {
		var err error
		if dir, err = os.MkdirTemp(base, "bench-plugin-"); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = os.RemoveAll(dir) })
	}
	registry := filepath.Join(dir, "registry")
	if err := os.MkdirAll(registry, 0o750); err != nil {
		b.Fatal(err)
	}
	port := freeLocalPort(b)
	p := &benchPlugin{node: node, log: filepath.Join(dir, "plugin.log"),
		socket: filepath.Join(dir, "plugins", driver, "dra.sock"), dataDir: filepath.Join(dir, "plugins", driver),
		metricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", port)}
	bin := filepath.Join(repoRoot, "_output", "bin", "gpu-kubelet-plugin")
	if b := os.Getenv("GPUDRA_PLUGIN_BIN"); b != "" { // e.g. another version, for an A/B comparison
		bin = b
	}
	gpuArgs := benchGPUArgs(b, dir, node)
	libs, _ := filepath.Glob(filepath.Join(dir, "driver-root", "usr", "lib", "*", "libnvidia-ml.so.*.*"))
	if len(libs) == 1 {
		p.nvmlLib = libs[0]
	}
	if coldFiles {
		dropPageCache(b, append(libs, bin)...)
	}
	// The hook the image ships (make images builds it), installed into the
	// plugin's directory as in the pod.
	hook := filepath.Join(repoRoot, "_output", "images", "bin", "nvidia-cdi-hook")
	p.start(b, "benchmark plugin", bin, append(gpuArgs, "--nvidia-cdi-hook-source", hook,
		"--node-name", node, "--kubeconfig", kubeconfig,
		"--cdi-root", benchCDIRoot(b, dir), "--kubelet-plugins-directory", filepath.Join(dir, "plugins"),
		"--kubelet-registrar-directory", registry, "--metrics-address", fmt.Sprintf("127.0.0.1:%d", port))...)
	return p
}

// start runs bin with args, logging to p.log, stops it and deletes the
// slices of its node when b ends, and waits until it serves p.socket.
func (p *benchPlugin) start(b *testing.B, what, bin string, args ...string) {
	p.cmd = exec.Command(bin, args...)
	logFile, err := os.Create(p.log)
	if err != nil {
		b.Fatal(err)
	}
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		b.Fatalf("start the %s %s: %v", what, bin, err)
	}
	b.Cleanup(func() {
		p.stop()
		_ = logFile.Close()
		_, _ = kubectl("delete", "resourceslices", "--field-selector", "spec.nodeName="+p.node)
	})
	for i := 0; i < 2000; i++ {
		if _, err := os.Stat(p.socket); err == nil {
			p.served = time.Now()
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	log, _ := os.ReadFile(p.log)
	b.Fatalf("%s %s did not serve %s:\n%s", what, bin, p.socket, log)
}

func (p *benchPlugin) stop() {
	if !p.stopped {
		p.stopped = true
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	}
}

// procMiB reads a memory field (VmRSS: resident now, VmHWM: peak resident)
// of a process from /proc in MiB.
func procMiB(b *testing.B, pid int, field string) float64 {
	v, err := procmem.Status(pid, field)
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// smapsRollup reads /proc/<pid>/smaps_rollup in MiB by field (Rss, Pss,
// Pss_Anon, Pss_File, ...).
func smapsRollup(b *testing.B, pid int) map[string]float64 {
	m, err := procmem.SmapsRollup(pid)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// mappedMiB is the resident memory (Rss) of the process's mappings of files
// whose name contains name.
func mappedMiB(b *testing.B, pid int, name string) float64 {
	v, err := procmem.Mapped(pid, name)
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// fakeNode creates a Node object without a kubelet (the owner of a benchmark
// plugin's slices) and deletes it when the benchmark ends.
func fakeNode(b *testing.B, name string) {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"gpudra.io/bench": "true"}},
		Spec: v1.NodeSpec{Taints: []v1.Taint{noKubeletTaint}}}
	if _, err := client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

func report(b *testing.B, what string, lat []time.Duration) {
	slices.Sort(lat)
	at := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(float64(len(lat))*p))].Microseconds()) / 1000
	}
	b.ReportMetric(at(0.5), what+"-p50-ms")
	b.ReportMetric(at(0.9), what+"-p90-ms")
	b.ReportMetric(at(0.99), what+"-p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, what+"-max-ms")
}

// allocatedClaimOf creates a claim of class and allocates devices gpu-<i>
// of driverName's pool node to it.
func allocatedClaimOf(b *testing.B, ns, name, driverName, class, node string, gpus ...int) *drapb.Claim {
	ctx := context.Background()
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class,
				AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: int64(len(gpus))},
		}}}},
	}
	c, err := client.ResourceV1().ResourceClaims(ns).Create(ctx, c, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	alloc := &resourceapi.AllocationResult{}
	for _, g := range gpus {
		alloc.Devices.Results = append(alloc.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: "gpu", Driver: driverName, Pool: node, Device: fmt.Sprintf("gpu-%d", g)})
	}
	c.Status.Allocation = alloc
	if _, err := client.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
		b.Fatal(err)
	}
	return &drapb.Claim{Namespace: ns, Name: name, Uid: string(c.UID)}
}
