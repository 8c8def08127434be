// Package gpuverify is gpudra's GPU verification kit: on a machine with
// NVIDIA GPUs (or a fake driver root) it runs the plugin's own code paths
// against the driver and reports, check by check, whether they work:
//
//  1. NVML opened as the plugin opens it, discovery (internal/plugin/discovery), the
//     ResourceSlice the plugin would publish (internal/plugin/slice, as `inspect` shows
//     it) and its API limits;
//  2. a whole-GPU claim per GPU and one with all GPUs, prepared and
//     unprepared through the real internal/plugin/prepare.Manager with the node's CDI
//     edits, in temporary directories;
//  3. every host path of every generated CDI spec exists, and the CDI
//     library loads the specs and injects them into an OCI spec;
//  4. the NVML event set and the health monitor's probes, watched for a
//     while (no findings expected on a healthy machine);
//  5. the plugin's telemetry sampler;
//  6. the rows of the NVML fidelity table (docs/nvml-fidelity.md) that a
//     GPU answers read-only: a real answer the row's real column does not
//     name is a table correction (fidelity.go);
//  7. the driver's tools as the plugin starts them (tools.go);
//  8. the sysfs files passthrough reads (passthrough.go);
//  9. what the node's libnvidia-ml adds to a process's memory (memory.go).
//
// The kit is read-only on GPU settings (see ReadOnlyStatement and guard.go).
//
// It is a library plus a plain main (test/cmd/gpudra-gpu-verify) rather than
// a `go test -c` binary: it is copied to a GPU machine and run by a person
// or a script, so it wants ordinary flags, a -json mode, an exit status of its
// own and no test-framework output; the library stays testable in CI with a
// simulated NVML and CDI edits injected through Config.
package gpuverify

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/internal/plugin/cdi"
	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/internal/plugin/nvmllib"
	"github.com/gpudra/gpudra/internal/shared/compat"
)

// ReadOnlyStatement heads every report.
const ReadOnlyStatement = "READ-ONLY on GPU settings: this kit never changes MIG mode, time slices or compute mode, " +
	"never resets a GPU, never starts MPS and never creates or destroys MIG instances. It prepares only whole GPUs " +
	"(GPUs in MIG mode: existing MIG devices are reported, not prepared), without sharing, with CDI specs, checkpoint " +
	"and locks in a temporary directory that it removes."

// EditsFunc returns the CDI edits provider of the node, as the plugin
// computes it at start-up (on a real node: cdi.NewNvcdiEdits, which logs
// through ctx's logger).
type EditsFunc func(ctx context.Context, lib nvml.Interface, node *model.Node) (cdi.EditsProvider, error)

// Config of a run.
type Config struct {
	// Open returns an initialized NVML library; Run shuts it down. On a
	// GPU machine: nvmllib.New with the driver root; in tests a simulated
	// server.
	Open func() (nvml.Interface, error)
	// Library describes where NVML comes from (for the report).
	Library string
	// Edits computes the node's CDI edits.
	Edits EditsFunc
	// NodeName names the node's pool; DriverName the DRA driver.
	NodeName   string
	DriverName string
	// DriverRoot is the --nvidia-driver-root (for the report).
	DriverRoot string
	// SysfsRoot is where discovery reads the GPUs' PCI topology ("" : /sys).
	SysfsRoot string
	// Roots, when set, are reported (ForDriverRoot sets them).
	Roots *nvmllib.Roots
	// Watch is how long the health step watches NVML events.
	Watch time.Duration
	// ProbeInterval is the health monitor's probe interval.
	ProbeInterval time.Duration
	// TempDir is where the temporary directory is created (default os.TempDir()).
	TempDir string
	// ShowSlices adds the ResourceSlices as YAML to the text report (the
	// JSON report always has them).
	ShowSlices bool
	// FailOnTableCorrections makes a table correction of step 6 (a real
	// answer the fidelity table's real column does not name) a failed
	// check; by default it is reported and the run does not fail on it.
	FailOnTableCorrections bool
	// Footprint, when set, measures what the library adds to a process's
	// memory (step 9; ForDriverRoot sets SelfFootprint).
	Footprint FootprintFunc
	// WatchStarted, when set, is called once the health watch has
	// registered for events and started the monitor (tests inject faults).
	WatchStarted func()
}

func (c *Config) validate() error {
	switch {
	case c.Open == nil:
		return errors.New("gpuverify: Config.Open is required")
	case c.Edits == nil:
		return errors.New("gpuverify: Config.Edits is required")
	case c.NodeName == "" || c.DriverName == "":
		return errors.New("gpuverify: Config.NodeName and Config.DriverName are required")
	case c.Watch < 0 || c.ProbeInterval < 0:
		return errors.New("gpuverify: Watch and ProbeInterval must not be negative")
	}
	return nil
}

// kit is one run.
type kit struct {
	cfg Config
	// names are the driver's names, resolved once from cfg.DriverName.
	names compat.Names
	lib   nvml.Interface
	r     *Report
}

// Run verifies the node and returns the report. The error is only for a
// Config that cannot run; everything the node gets wrong is a failed check
// in the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	names, err := compat.Resolve(compat.Flags{Driver: cfg.DriverName})
	if err != nil {
		return nil, fmt.Errorf("gpuverify: %w", err)
	}
	k := &kit{cfg: cfg, names: names, r: &Report{ReadOnly: ReadOnlyStatement, NodeName: cfg.NodeName, DriverRoot: cfg.DriverRoot,
		Library: cfg.Library}}
	defer k.r.count()
	node := k.inspect(ctx)
	if k.lib != nil {
		defer k.shutdown()
	}
	if node == nil {
		k.r.section("2-5. Prepare, CDI, health, telemetry").info("Skipped: NVML or discovery failed (above).")
	} else {
		k.claims(ctx, node)
		k.health(ctx, node)
		k.telemetry(ctx, node)
	}
	if k.lib != nil {
		k.fidelity()
	}
	if node != nil {
		k.tools(ctx, node)
		k.passthrough(node)
	}
	if k.lib != nil {
		k.memory(ctx, node)
	}
	return k.r, nil
}

func (k *kit) shutdown() {
	if ret := k.lib.Shutdown(); ret != nvml.SUCCESS {
		s := k.r.section("Shutdown")
		s.fail("NVML shutdown: %v", ret)
	}
}

// tempDirs is the run's scratch space: CDI specs, checkpoint, locks.
type tempDirs struct {
	root, cdi, checkpoint, locks string
}

func makeTempDirs(parent string) (*tempDirs, error) {
	root, err := os.MkdirTemp(parent, "gpudra-gpu-verify-")
	if err != nil {
		return nil, fmt.Errorf("create a temporary directory (set -tmp-dir to a writable directory): %w", err)
	}
	d := &tempDirs{root: root, cdi: root + "/cdi", checkpoint: root + "/checkpoint", locks: root + "/locks"}
	for _, p := range []string{d.cdi, d.locks} {
		if err := os.Mkdir(p, 0o700); err != nil {
			_ = os.RemoveAll(root)
			return nil, fmt.Errorf("create %s: %w", p, err)
		}
	}
	return d, nil
}
