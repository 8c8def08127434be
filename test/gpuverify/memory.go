package gpuverify

import (
	"context"
	"time"

	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/test/nvmlmem"
)

// memoryTitle is step 9's section title.
const memoryTitle = "9. Memory: what this node's libnvidia-ml adds to a process (test/nvmlmem)"

// FootprintFunc measures what the run's NVML library adds to an idle
// process's resident memory.
type FootprintFunc func(ctx context.Context) (nvmlmem.Footprint, error)

// footprintSettle is how long each child idles before it is read, as the
// benchmark reads the plugin and the simulated library's children.
const footprintSettle = 2 * time.Second

// SelfFootprint measures library with children of this program, which must
// call nvmlmem.RunChild first (the kit's main does; so do this package's
// tests).
func SelfFootprint(library string) FootprintFunc {
	return func(ctx context.Context) (nvmlmem.Footprint, error) {
		cmd, err := nvmlmem.SelfCommand(ctx)
		if err != nil {
			return nvmlmem.Footprint{}, err
		}
		return nvmlmem.Measure(ctx, library, nvmlmem.Options{Command: cmd, Settle: footprintSettle})
	}
}

// memory is step 9: the resident memory a process gains from loading and
// initialising the node's libnvidia-ml and reading its GPUs, as
// BenchmarkDRASock measures the simulated library's (the plugin's idle RSS
// there is reported with and without it). Two short-lived child processes;
// nothing on the GPU changes. node, when discovery succeeded, gives the
// number of GPUs the child must have read.
func (k *kit) memory(ctx context.Context, node *model.Node) {
	s := k.r.section(memoryTitle)
	if k.cfg.Footprint == nil {
		// Only a driver root's library can be loaded by another process.
		s.info("Skipped: NVML is not a library this kit can load in a child process (%s)", k.cfg.Library)
		return
	}
	f, err := k.cfg.Footprint(ctx)
	if !s.check(err, "a child process loaded and initialised the library and read its GPUs; another idled without it") {
		return
	}
	k.r.Memory = &f
	if node != nil && f.GPUs != len(node.GPUs) {
		s.fail("the child read %d GPUs, discovery %d", f.GPUs, len(node.GPUs))
	}
	s.info("%s, initialised with its %d GPUs read, adds %.1f MiB resident to an idle process: %.1f MiB anonymous, "+
		"%.1f MiB file-backed (the library's own mappings: %.1f MiB)", f.Library, f.GPUs, f.RSS, f.Anon, f.File, f.Mapped)
	s.info("The plugin's idle RSS on this node is about BenchmarkDRASock's \"idle RSS less what the simulated " +
		"libnvidia-ml adds\" (docs/performance.md) plus this figure.")
}
