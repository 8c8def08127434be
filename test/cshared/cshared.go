// Package cshared builds the simulators' C shared libraries (the simulated
// libnvidia-ml and libnvfm; test-only, never shipped) with the go command,
// as the Makefile's sim-* targets do. The libraries link it (through the
// simulators' Build functions), so it imports neither testing nor testify:
// the checks their tests make live in cshtest.
package cshared

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// Build compiles the main package pkg with -buildmode=c-shared and ldflags
// into the file out; what names the library in errors. It runs the go
// command (from PATH, with a C compiler for cgo) inside this module, with
// the environment and env added. The C header the build writes next to out
// is removed.
func Build(ctx context.Context, what, pkg, ldflags, out string, env ...string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("building %s needs the go command in PATH: %w", what, err)
	}
	cmd := exec.CommandContext(ctx, goBin, "build", "-buildmode=c-shared", "-trimpath", "-ldflags="+ldflags, "-o", out, pkg)
	cmd.Env = append(os.Environ(), env...)
	if o, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s (%s): %w\n%s", what, pkg, err, o)
	}
	_ = os.Remove(strings.TrimSuffix(out, ".so") + ".h")
	return nil
}
