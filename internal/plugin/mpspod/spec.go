// Package mpspod runs the MPS control daemon of a claim as a Pod of its own,
// outside the plugin's container, so that restarts, crashes and upgrades of
// the plugin never end it: PodRunner (the plugin's side, a
// sharing.DaemonRunner) creates and deletes the Pods, RunDaemon (the
// `gpu-kubelet-plugin mps-control-daemon` subcommand, the Pod's only
// process) starts nvidia-cuda-mps-control in the driver root.
package mpspod

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/internal/plugin/sharing"
)

// Names and labels of daemon Pods. The chart's admission policy checks
// the same values: change both together.
const (
	// NamePrefix + the claim's UID is a daemon Pod's name.
	NamePrefix = "gpudra-mps-"
	// ComponentLabel marks daemon Pods (value ComponentValue).
	ComponentLabel = "app.kubernetes.io/component"
	ComponentValue = "mps-control-daemon"
	// ClaimLabel holds the claim's UID, NodeLabel the node's name.
	ClaimLabel = "gpudra.io/mps-claim-uid"
	// GroupLabel holds the configuration group of a claim's further daemon
	// (1, 2, …); group 0's Pod has none, as before claims had a daemon per
	// group.
	GroupLabel = "gpudra.io/mps-group"
	NodeLabel  = "gpudra.io/mps-node"
	// Subcommand is the plugin binary's subcommand the Pod runs.
	Subcommand = "mps-control-daemon"
	// Binary is the plugin binary in the image.
	Binary = "/usr/local/bin/gpu-kubelet-plugin"
	// PodDriverRoot is where a daemon Pod mounts the driver root.
	PodDriverRoot = "/driver-root"
	// PodMPSDir holds the pipe and log directories of a daemon that does
	// not run chrooted.
	PodMPSDir = "/mps"
	// ChrootLogDir is the log directory as a chrooted daemon sees it: below
	// /tmp, like its pipe directory (sharing.ContainerPipeDir), because the
	// Pod mounts an emptyDir at the root's /tmp (PodChrootTmp).
	ChrootLogDir = "/tmp/nvidia-mps-log"
	// PodChrootTmp is the emptyDir over the driver root's /tmp in a chrooted
	// daemon's Pod. The driver root is mounted read-only, so the container
	// runtime could not create the mount points of the pipe and log
	// directories in it; it creates them in this Pod-private directory
	// instead, never on the host. Every whole-system root has a /tmp.
	PodChrootTmp = PodDriverRoot + "/tmp"
)

// Layout is how the daemon runs in the driver root, decided by the plugin
// from what the root holds, the way NVIDIA's DRA driver decides it.
type Layout struct {
	// Chroot: the root is a whole system (it has a shell: a host install,
	// the GPU Operator's driver container); the daemon runs chrooted into
	// it, with the root's own libc.
	Chroot bool
	// Control is nvidia-cuda-mps-control as the daemon sees it: inside the
	// root when chrooted, under PodDriverRoot otherwise.
	Control string
	// Env is the loader's environment when not chrooted (GKE: the root has
	// only bin/ and lib64/ with NVIDIA's libraries, no libc of its own).
	Env []string
}

// DetectLayout reads the driver root as the plugin sees it (root).
func DetectLayout(root string) Layout {
	exists := func(p string) bool { _, err := os.Lstat(filepath.Join(root, p)); return err == nil }
	l := Layout{Chroot: exists("bin/sh") || exists("usr/bin/sh")}
	bin := "usr/bin"
	if !exists("usr/bin/nvidia-cuda-mps-control") && exists("bin/nvidia-cuda-mps-control") {
		bin = "bin"
	}
	if l.Chroot {
		l.Control = "/" + bin + "/nvidia-cuda-mps-control"
		return l
	}
	l.Control = filepath.Join(PodDriverRoot, bin, "nvidia-cuda-mps-control")
	l.Env = []string{"PATH=" + filepath.Join(PodDriverRoot, bin) + ":/usr/local/bin:/usr/bin:/bin"}
	if exists("lib64") {
		l.Env = append(l.Env, "LD_LIBRARY_PATH="+filepath.Join(PodDriverRoot, "lib64"))
	}
	return l
}

// PodConfig is what every daemon Pod of a node shares.
type PodConfig struct {
	Namespace string
	NodeName  string
	// Node owns the Pods: they go with the Node object.
	Node *metav1.OwnerReference
	// Image is the plugin's image (the daemon's entry point is the plugin
	// binary; the image has no shell).
	Image           string
	ImagePullPolicy corev1.PullPolicy
	PullSecrets     []corev1.LocalObjectReference
	// HostDriverRoot is the driver root as the host sees it.
	HostDriverRoot string
	Layout         Layout
	Resources      corev1.ResourceRequirements
	PriorityClass  string
	// ServiceAccount runs the Pod; it mounts no token either way.
	ServiceAccount string
}

// Name is the daemon Pod's name of a claim.
func Name(claimUID string, group int) string {
	if group == 0 {
		return NamePrefix + claimUID
	}
	return NamePrefix + claimUID + groupSuffix + strconv.Itoa(group)
}

// groupSuffix + the group number ends the name of a further group's Pod:
// "gpudra-mps-" (11) + a UID (36) + "-g" + a number stays far below the 63
// characters of a Pod's hostname.
const groupSuffix = "-g"

// paths returns where the pipe, log and shm directories are, as the
// daemon Pod mounts them.
func (c *PodConfig) paths() (pipe, log, shm string) {
	if c.Layout.Chroot {
		// Where the chrooted daemon sees them: below the root's /tmp (the
		// Pod's emptyDir PodChrootTmp), and the root's /dev/shm (which
		// every whole-system root has: no mount point to create).
		return filepath.Join(PodDriverRoot, sharing.ContainerPipeDir), filepath.Join(PodDriverRoot, ChrootLogDir),
			filepath.Join(PodDriverRoot, sharing.ContainerShmDir)
	}
	return filepath.Join(PodMPSDir, "pipe"), filepath.Join(PodMPSDir, "log"), sharing.ContainerShmDir
}

// Pod is the Pod of the claim's daemon d (its directory, a host path, is
// d.Dir; its name and labels say its claim and group).
func (c *PodConfig) Pod(claimUID string, d *sharing.MPSDaemon) *corev1.Pod {
	pipe, log, shm := c.paths()
	// The daemon's own view of its directories: inside the root when it
	// runs chrooted there (RunDaemon adds the root for its own use).
	daemonPipe, daemonLog := pipe, log
	if c.Layout.Chroot {
		daemonPipe, daemonLog = sharing.ContainerPipeDir, ChrootLogDir
	}
	args := []string{Subcommand, "--control=" + c.Layout.Control, "--pipe-dir=" + daemonPipe, "--log-dir=" + daemonLog,
		"--devices=" + strings.Join(d.Devices, ",")}
	if c.Layout.Chroot {
		args = append(args, "--chroot="+PodDriverRoot)
	}
	for _, cmd := range sharing.Commands(d) {
		args = append(args, "--set="+cmd)
	}
	var env []corev1.EnvVar
	for _, kv := range c.Layout.Env {
		k, v, _ := strings.Cut(kv, "=")
		env = append(env, corev1.EnvVar{Name: k, Value: v})
	}
	hostDir := func(name, path string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
			Path: path, Type: ptr.To(corev1.HostPathDirectory)}}}
	}
	// The driver root read-only: the daemon only reads and runs it; its own
	// directories are mounts of their own. A chrooted daemon's /tmp
	// (PodChrootTmp) comes before the mounts below it.
	mounts := []corev1.VolumeMount{{Name: "driver-root", MountPath: PodDriverRoot, ReadOnly: true,
		MountPropagation: ptr.To(corev1.MountPropagationHostToContainer)}}
	volumes := []corev1.Volume{hostDir("driver-root", c.HostDriverRoot), hostDir("pipe", sharing.PipeDir(d.Dir)),
		hostDir("log", sharing.LogDir(d.Dir)), hostDir("shm", sharing.ShmDir(d.Dir))}
	if c.Layout.Chroot {
		mounts = append(mounts, corev1.VolumeMount{Name: "root-tmp", MountPath: PodChrootTmp})
		volumes = append(volumes, corev1.Volume{Name: "root-tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	}
	mounts = append(mounts, corev1.VolumeMount{Name: "pipe", MountPath: pipe}, corev1.VolumeMount{Name: "log", MountPath: log},
		corev1.VolumeMount{Name: "shm", MountPath: shm})
	labels := map[string]string{ComponentLabel: ComponentValue, ClaimLabel: claimUID, NodeLabel: c.NodeName}
	if d.Group > 0 {
		labels[GroupLabel] = strconv.Itoa(d.Group)
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: Name(claimUID, d.Group), Namespace: c.Namespace, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName: c.NodeName,
			// The daemon's processes, and so the PID it writes, are the
			// host's, as with NVIDIA's daemon.
			HostPID:                      true,
			RestartPolicy:                corev1.RestartPolicyOnFailure,
			ServiceAccountName:           c.ServiceAccount,
			AutomountServiceAccountToken: ptr.To(false),
			PriorityClassName:            c.PriorityClass,
			ImagePullSecrets:             c.PullSecrets,
			// It runs wherever the claim's GPU is, whatever the node's taints.
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			Containers: []corev1.Container{{
				Name: "mps-control-daemon", Image: c.Image, ImagePullPolicy: c.ImagePullPolicy,
				Command: []string{Binary}, Args: args, Env: env, Resources: c.Resources,
				// Privileged: the MPS server opens the GPUs' device nodes.
				SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true), RunAsUser: ptr.To[int64](0)},
				VolumeMounts:    mounts,
			}},
			Volumes: volumes,
		},
	}
	if c.Node != nil {
		p.OwnerReferences = []metav1.OwnerReference{*c.Node}
	}
	return p
}
