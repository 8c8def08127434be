package nvmllib

import (
	"os/exec"
	"path/filepath"
)

// ToolDirs are the directories, relative to the driver root, where the
// driver's tools (nvidia-smi, nvidia-cuda-mps-control) are looked up, in
// order: /usr/bin and /usr/sbin of a host or the GPU Operator's driver
// container, /bin of GKE's /home/kubernetes/bin/nvidia, /opt/bin and /sbin
// of other installations.
var ToolDirs = []string{"usr/bin", "usr/sbin", "bin", "sbin", "opt/bin"}

// FindTool returns the first of ToolDirs under driverRoot that has the
// tool, else the tool on $PATH, else "".
func FindTool(driverRoot, name string) string {
	for _, dir := range ToolDirs {
		if p := filepath.Join(driverRoot, dir, name); Exists(p) {
			return p
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	return ""
}

// ToolEnv is what the environment of a driver tool started from a driver
// root mounted elsewhere (the plugin's container) gets: only the root's
// libnvidia-ml.so.1 preloaded, as NVIDIA starts nvidia-smi. Never the
// root's library directory on LD_LIBRARY_PATH: it holds the host's own C
// library, which another loader cannot use when the versions differ (Ubuntu
// or RHEL hosts), so every tool would fail to start. A root of "/" needs
// nothing: the tools run with the host's own loader setup.
func ToolEnv(driverRoot string) []string {
	if driverRoot == "/" || driverRoot == "" {
		return nil
	}
	lib, err := FindLibrary(driverRoot)
	if err != nil {
		return nil // no NVML: discovery has failed already, with the reason
	}
	return []string{"LD_PRELOAD=" + lib}
}
