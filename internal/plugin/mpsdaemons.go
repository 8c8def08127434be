package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/plugin/mpspod"
	"github.com/gpudra/gpudra/internal/plugin/sharing"
)

// Where MPS control daemons run (--mps-daemon).
const (
	// MPSDaemonProcess: child processes of the plugin (ends with its container).
	MPSDaemonProcess = "process"
	// MPSDaemonPod: a Pod per claim and configuration group (internal/plugin/mpspod), what the chart uses.
	MPSDaemonPod = "pod"
)

// MPSDaemonOptions configure where MPS control daemons run.
type MPSDaemonOptions struct {
	Mode           string
	Image          string
	PullPolicy     string
	Namespace      string
	ServiceAccount string
	PriorityClass  string
	// Resources is a JSON ResourceRequirements.
	Resources    string
	StartTimeout time.Duration
	ShmTmpfs     bool
	ShmSize      string
}

func (o *Options) addMPSDaemonFlags(fs *pflag.FlagSet) {
	m := &o.MPSDaemon
	fs.StringVar(&m.Mode, "mps-daemon", MPSDaemonProcess,
		"Where MPS control daemons run: 'process' (children of the plugin: a restart of its container ends them) or "+
			"'pod' (a Pod per claim and MPS configuration group in --mps-daemon-namespace, pinned to this node, running --mps-daemon-image; survives plugin restarts and upgrades).")
	fs.StringVar(&m.Image, "mps-daemon-image", "", "Image of MPS control daemon Pods: the plugin's own (its mps-control-daemon subcommand).")
	fs.StringVar(&m.PullPolicy, "mps-daemon-image-pull-policy", string(corev1.PullIfNotPresent), "Pull policy of that image.")
	fs.StringVar(&m.Namespace, "mps-daemon-namespace", "", "Namespace of MPS control daemon Pods (the plugin's). [$POD_NAMESPACE]")
	fs.StringVar(&m.ServiceAccount, "mps-daemon-service-account", "", "ServiceAccount of MPS control daemon Pods (no token is mounted).")
	fs.StringVar(&m.PriorityClass, "mps-daemon-priority-class", "", "Priority class of MPS control daemon Pods.")
	fs.StringVar(&m.Resources, "mps-daemon-resources", "", "Resources of MPS control daemon Pods, as JSON ResourceRequirements.")
	fs.DurationVar(&m.StartTimeout, "mps-daemon-start-timeout", 40*time.Second,
		"How long a prepare waits for a new MPS control daemon Pod to answer; it fails after that with the Pod's state.")
	fs.BoolVar(&m.ShmTmpfs, "mps-shm-tmpfs", false,
		"Mount a tmpfs on each MPS claim's shm directory (the /dev/shm of its daemon and containers); needs a privileged plugin "+
			"whose plugin directory propagates mounts (Bidirectional). Otherwise, or where mounting is refused, a plain directory.")
	fs.StringVar(&m.ShmSize, "mps-shm-size", "", "Size of that tmpfs (e.g. 1Gi as 1g); empty: the kernel's default.")
}

func (o *Options) validateMPSDaemon() error {
	m := o.MPSDaemon
	switch m.Mode {
	case "", MPSDaemonProcess:
		return nil
	case MPSDaemonPod:
	default:
		return fmt.Errorf("--mps-daemon=%q: must be %q or %q", m.Mode, MPSDaemonProcess, MPSDaemonPod)
	}
	if m.Image == "" || m.Namespace == "" {
		return fmt.Errorf("--mps-daemon=pod needs --mps-daemon-image and --mps-daemon-namespace")
	}
	if m.Resources != "" {
		var r corev1.ResourceRequirements
		if err := json.Unmarshal([]byte(m.Resources), &r); err != nil {
			return fmt.Errorf("--mps-daemon-resources: %w", err)
		}
	}
	return nil
}

// configureMPS makes mps run its daemons as Pods when --mps-daemon=pod.
func (o *Options) configureMPS(ctx context.Context, mps *sharing.MPSControl, client kubernetes.Interface) error {
	m := o.MPSDaemon
	mps.UseShm(m.ShmTmpfs, m.ShmSize)
	if m.Mode != MPSDaemonPod {
		return nil
	}
	cfg := mpspod.PodConfig{Namespace: m.Namespace, NodeName: o.NodeName, Image: m.Image, ImagePullPolicy: corev1.PullPolicy(m.PullPolicy),
		HostDriverRoot: o.roots().HostDriver, Layout: mpspod.DetectLayout(o.roots().Driver), PriorityClass: m.PriorityClass, ServiceAccount: m.ServiceAccount}
	if m.Resources != "" {
		if err := json.Unmarshal([]byte(m.Resources), &cfg.Resources); err != nil {
			return fmt.Errorf("--mps-daemon-resources: %w", err)
		}
	}
	node, err := client.CoreV1().Nodes().Get(ctx, o.NodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get node %s (owner of its MPS control daemon Pods): %w", o.NodeName, err)
	}
	cfg.Node = &metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}
	mps.UseRunner(&mpspod.PodRunner{Client: client, Config: cfg}, sharing.RunnerOptions{StartTimeout: m.StartTimeout, StopTimeout: time.Minute})
	klog.FromContext(ctx).Info("MPS control daemons run as Pods", "namespace", m.Namespace, "image", m.Image,
		"chroot", cfg.Layout.Chroot, "control", cfg.Layout.Control)
	return nil
}
