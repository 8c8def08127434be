package sharing

import "bytes"

// What /proc tells about an MPS control daemon, in one place for the
// plugin (MPSControl.isDaemonOf), its tests and the e2e suite's process
// scans.

// PipeDirEnv names the directory of an MPS daemon's pipes, for the daemon
// and for its clients.
const PipeDirEnv = "CUDA_MPS_PIPE_DIRECTORY"

// IsControlDaemonCmdline reports whether a /proc/<pid>/cmdline is an MPS
// control daemon's: the control tool with exactly one argument, -f
// (foreground: how the plugin and the daemon Pod start it) or -d
// (daemonized: how it is started by hand). The tool's own name is not
// checked, since --mps-control-path may name it anything. The control
// tool run as a client has no argument (commands on stdin), and the daemon
// Pod's wrapper (gpu-kubelet-plugin mps-control-daemon ... -f) has more.
func IsControlDaemonCmdline(cmdline []byte) bool {
	args := bytes.Split(bytes.TrimRight(cmdline, "\x00"), []byte{0})
	return len(args) == 2 && (string(args[1]) == "-f" || string(args[1]) == "-d")
}

// PipeDirectoryOf returns CUDA_MPS_PIPE_DIRECTORY from a
// /proc/<pid>/environ: the pipe directory a daemon serves.
func PipeDirectoryOf(environ []byte) (string, bool) {
	for _, kv := range bytes.Split(environ, []byte{0}) {
		if dir, ok := bytes.CutPrefix(kv, []byte(PipeDirEnv+"=")); ok {
			return string(dir), true
		}
	}
	return "", false
}
