// Package imexdaemon is the IMEX daemon of a ComputeDomain on one node:
// `gpu-kubelet-plugin imex-daemon run` writes nvidia-imex's configuration,
// runs nvidia-imex in the foreground chrooted into the driver root, restarts
// it when the node side changes the domain's node list and when it dies
// (bounded), and `imex-daemon check` is the pod's readiness probe through
// nvidia-imex-ctl. The contract with the node side is internal/shared/imex.
package imexdaemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gpudra/gpudra/internal/plugin/nvmllib"
	"github.com/gpudra/gpudra/internal/shared/imex"
)

// Options of the daemon. FromEnv fills them from the container's
// environment; the rest have defaults.
type Options struct {
	// DomainUID is the ComputeDomain's UID ($COMPUTE_DOMAIN_UID).
	DomainUID string
	// NodesConfig is the node side's node list ($GPUDRA_IMEX_NODES_CONFIG).
	NodesConfig string
	// DriverRoot is the driver root the tools run chrooted into
	// ($GPUDRA_DRIVER_ROOT); empty: from $PATH, unchrooted.
	DriverRoot string
	// TmpDir is the directory, inside DriverRoot (or on this host when
	// DriverRoot is empty), under which imex.WorkDirBase lies; default
	// "/". Tests set it.
	TmpDir string
	// Poll is how often the node list is read (default 1s).
	Poll time.Duration
	// MaxRestarts bounds how many times in a row nvidia-imex may die
	// before run gives up (default 5); a daemon that ran for StableAfter
	// (default 1m) starts the count again. Backoff is the first wait
	// before a restart (default 1s), doubled each time up to 30s.
	MaxRestarts int
	StableAfter time.Duration
	Backoff     time.Duration
	// StopTimeout bounds the wait for nvidia-imex to end after SIGTERM
	// before it is killed (default 10s).
	StopTimeout time.Duration
	// CheckTimeout bounds nvidia-imex-ctl in check (default 5s).
	CheckTimeout time.Duration
	// ServerPort and CmdPort default to imex.ServerPort and imex.CmdPort;
	// tests that run several daemons on one host set others.
	ServerPort, CmdPort int
}

// FromEnv reads the contract's environment variables.
func FromEnv(lookup func(string) (string, bool)) Options {
	get := func(k string) string { v, _ := lookup(k); return v }
	return Options{DomainUID: get(imex.DomainUIDEnv), NodesConfig: get(imex.NodesConfigEnv), DriverRoot: get(imex.DriverRootEnv)}
}

func (o *Options) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.Poll, time.Second)
	def(&o.StableAfter, time.Minute)
	def(&o.Backoff, time.Second)
	def(&o.StopTimeout, 10*time.Second)
	def(&o.CheckTimeout, 5*time.Second)
	if o.MaxRestarts <= 0 {
		o.MaxRestarts = 5
	}
	if o.ServerPort == 0 {
		o.ServerPort = imex.ServerPort
	}
	if o.CmdPort == 0 {
		o.CmdPort = imex.CmdPort
	}
	if o.TmpDir == "" {
		o.TmpDir = "/"
	}
}

// Validate says what of the environment is missing or wrong; run needs the
// node list, check does not.
func (o *Options) Validate(run bool) error {
	var errs []error
	if o.DomainUID == "" || strings.ContainsAny(o.DomainUID, "/\\") || o.DomainUID == "." || o.DomainUID == ".." {
		errs = append(errs, fmt.Errorf("$%s must be the ComputeDomain's UID (the controller's DaemonSet sets it), got %q", imex.DomainUIDEnv, o.DomainUID))
	}
	if run && !filepath.IsAbs(o.NodesConfig) {
		errs = append(errs, fmt.Errorf("$%s must be the absolute path of the domain's node list (the claim of the daemon pod sets it through CDI; is the pod's claim prepared by gpudra's kubelet plugin?), got %q",
			imex.NodesConfigEnv, o.NodesConfig))
	}
	if o.DriverRoot != "" {
		if fi, err := os.Stat(o.DriverRoot); err != nil || !fi.IsDir() {
			errs = append(errs, fmt.Errorf("$%s=%s is not a directory (the driver root mounted into the daemon container): %w", imex.DriverRootEnv, o.DriverRoot, errOr(err, "not a directory")))
		}
	}
	return errors.Join(errs...)
}

func errOr(err error, msg string) error {
	if err != nil {
		return err
	}
	return errors.New(msg)
}

// workDir is the directory of the daemon's files as nvidia-imex sees it
// (inside the chroot); hostPath maps such a path to this process's view.
func (o *Options) workDir() string {
	return path.Join(o.TmpDir, imex.WorkDirBase, o.DomainUID)
}

func (o *Options) hostPath(p string) string {
	if o.DriverRoot == "" {
		return p
	}
	return filepath.Join(o.DriverRoot, p)
}

func (o *Options) configPath() string { return path.Join(o.workDir(), imex.ConfigFile) }
func (o *Options) nodesPath() string  { return path.Join(o.workDir(), imex.NodesFile) }

// tool returns the path of one of the IMEX tools as it is started: inside
// the driver root's tool directories (usr/bin, bin on GKE, ...), or from
// $PATH when there is no driver root.
func (o *Options) tool(name string) (string, error) {
	if o.DriverRoot == "" {
		p, err := exec.LookPath(name)
		if err != nil {
			return "", fmt.Errorf("%s not found on $PATH (no $%s is set, so the tools are run from $PATH): %w", name, imex.DriverRootEnv, err)
		}
		return p, nil
	}
	for _, dir := range nvmllib.ToolDirs {
		if fi, err := os.Stat(filepath.Join(o.DriverRoot, dir, name)); err == nil && fi.Mode().IsRegular() {
			return "/" + path.Join(dir, name), nil
		}
	}
	return "", fmt.Errorf("%s not found in the driver root %s (looked in %s): install NVIDIA's IMEX package (nvidia-imex) for this driver on the node",
		name, o.DriverRoot, strings.Join(nvmllib.ToolDirs, ", "))
}

// command runs one of the tools, chrooted into the driver root if set, as
// internal/plugin/mpspod runs nvidia-cuda-mps-control: the real tools are
// linked against the host's C library.
func (o *Options) command(ctx context.Context, tool string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, tool, args...)
	if o.DriverRoot != "" {
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: o.DriverRoot}
		cmd.Dir = "/"
	}
	return cmd
}
