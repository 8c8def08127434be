package sharing

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// Each MPS claim has a shm directory (<Root>/<claimUID>/shm) that is
// /dev/shm for its daemon and for every container of the claim, so that
// the MPS server and its clients share the memory they exchange. It is a
// tmpfs of its own where the plugin may mount one (MPSOptions.ShmTmpfs, a
// privileged plugin whose plugin directory propagates mounts to the host);
// elsewhere (the simulated, unprivileged plugin) a plain directory on the
// host's disk, shared all the same.

// ContainerShmDir is where the claim's shm directory is mounted.
const ContainerShmDir = "/dev/shm"

// ShmDir is the shm directory of a claim's daemon directory.
func ShmDir(dir string) string { return filepath.Join(dir, shmSubdir) }

// PipeDir and LogDir are the pipe and log directories of a claim's daemon
// directory.
func PipeDir(dir string) string { return filepath.Join(dir, pipeSubdir) }

// LogDir: see PipeDir.
func LogDir(dir string) string { return filepath.Join(dir, logSubdir) }

// mountShm mounts a tmpfs on shm unless one is mounted there already (a
// restarted plugin finds the mount of its predecessor) or ShmTmpfs is off.
// A mount that is not permitted leaves a plain directory, logged once.
func (c *MPSControl) mountShm(ctx context.Context, shm string) {
	if !c.opts.ShmTmpfs || isMountPoint(shm) {
		return
	}
	opts := "mode=1777"
	if c.opts.ShmSize != "" {
		opts += ",size=" + c.opts.ShmSize
	}
	err := unix.Mount("gpudra-mps-shm", shm, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts)
	switch {
	case err == nil:
		klog.FromContext(ctx).V(4).Info("Mounted the tmpfs of an MPS claim", "path", shm)
	case errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES):
		c.shmWarned.Do(func() {
			klog.FromContext(ctx).Info("Not permitted to mount a tmpfs for MPS claims (unprivileged plugin); "+
				"their /dev/shm is a plain directory on the host's disk", "path", shm, "err", err)
		})
	default:
		klog.FromContext(ctx).Error(err, "No tmpfs for an MPS claim; its /dev/shm is a plain directory", "path", shm)
	}
}

// releaseShm unmounts the tmpfs of a claim's directory, if one is there
// (lazily: a container that still has it open keeps its own view).
func (c *MPSControl) releaseShm(ctx context.Context, dir string) {
	shm := ShmDir(dir)
	if !isMountPoint(shm) {
		return
	}
	if err := unix.Unmount(shm, unix.MNT_DETACH); err != nil {
		klog.FromContext(ctx).Error(err, "The tmpfs of an MPS claim could not be unmounted", "path", shm)
	}
}

// isMountPoint reports whether dir is on another file system than its
// parent (bind mounts of the same file system are not told apart, and need
// not be: the plugin mounts only tmpfs here).
func isMountPoint(dir string) bool {
	var st, parent unix.Stat_t
	if unix.Lstat(dir, &st) != nil || unix.Lstat(filepath.Dir(dir), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// ControlPIDFile is the file, in its pipe directory, where the control
// daemon writes its PID (in the daemon's PID namespace: the host's for a
// daemon Pod, which runs with hostPID like NVIDIA's).
const ControlPIDFile = "nvidia-cuda-mps-control.pid"

// controlPID reads it (0 if unknown).
func controlPID(dir string) int {
	b, err := os.ReadFile(filepath.Join(PipeDir(dir), ControlPIDFile))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}
