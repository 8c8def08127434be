//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// nvmlLibFootprint is what loading and initialising the NVML library lib
// adds to an idle process, in MiB of RSS and of anonymous RSS: the
// difference between gpudra-nvml-idle started with it and without it, each
// read like the benchmark plugin (its files dropped from the page cache
// first, read 2 s after start). For the simulated library that is its
// mapped pages and its own Go runtime, which a node's C library does not
// have: BenchmarkDRASock reports the plugin's idle RSS less it beside the
// figure as measured.
func nvmlLibFootprint(b *testing.B, lib string) (rss, anon float64) {
	bin := filepath.Join(repoRoot, "_output", "bin", "gpudra-nvml-idle")
	idle := func(args ...string) (rss, anon float64) {
		dropPageCache(b, bin, lib)
		cmd := exec.Command(bin, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatalf("start %s: %v", bin, err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			b.Fatalf("%s %v: %q %v\n%s", bin, args, line, err, stderr.String())
		}
		time.Sleep(2 * time.Second) // as the plugin had
		return procMiB(b, cmd.Process.Pid, "VmRSS"), procMiB(b, cmd.Process.Pid, "RssAnon")
	}
	rss0, anon0 := idle()
	rss1, anon1 := idle("--library", lib)
	return rss1 - rss0, anon1 - anon0
}
