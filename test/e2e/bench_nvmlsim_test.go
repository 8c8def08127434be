//go:build e2e

package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpudra/gpudra/test/nvmlmem"
)

// nvmlLibFootprint is what loading and initialising the NVML library lib
// (and reading its GPUs as discovery does) adds to an idle process, in MiB
// of RSS and of anonymous RSS: the difference between gpudra-nvml-idle
// started with it and without it (test/nvmlmem), each read like the
// benchmark plugin (its files dropped from the page cache first, read 2 s
// after start). For the simulated library that is its mapped pages and its
// own Go runtime, which a node's C library does not have: BenchmarkDRASock
// reports the plugin's idle RSS less it beside the figure as measured. The
// GPU verification kit measures a node's real library the same way.
func nvmlLibFootprint(b *testing.B, lib string) (rss, anon float64) {
	bin := filepath.Join(repoRoot, "_output", "bin", "gpudra-nvml-idle")
	f, err := nvmlmem.Measure(context.Background(), lib, nvmlmem.Options{
		Command:     func(args ...string) *exec.Cmd { return exec.Command(bin, args...) },
		Settle:      2 * time.Second, // as the plugin had
		BeforeStart: func() error { dropPageCache(b, bin, lib); return nil },
	})
	if err != nil {
		b.Fatal(err)
	}
	return f.RSS, f.Anon
}
