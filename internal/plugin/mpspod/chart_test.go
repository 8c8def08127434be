package mpspod

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/gpudra/gpudra/internal/plugin/sharing"
	"github.com/gpudra/gpudra/test/chart"
)

// mpsDaemonPods builds the daemon Pods the plugin creates, with spec.go's
// own code (DetectLayout on roots of each kind, PodConfig.Pod), so
// that the policy and the Pods cannot drift apart: a chrooted daemon with
// both kinds of settings, an unchrooted one with each loader environment,
// and a further configuration group's.
func mpsDaemonPods(t *testing.T, ns, image, hostRoot, mpsDir, uid string) map[string]*corev1.Pod {
	t.Helper()
	root := func(files ...string) string {
		dir := t.TempDir()
		for _, f := range files {
			if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, f), nil, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	layouts := map[string]Layout{
		"chroot":              DetectLayout(root("bin/sh", "usr/bin/nvidia-cuda-mps-control")),
		"chroot, bin":         DetectLayout(root("usr/bin/sh", "bin/nvidia-cuda-mps-control")),
		"no chroot, lib64":    DetectLayout(root("bin/nvidia-cuda-mps-control", "lib64/libcuda.so.1")),
		"no chroot, no lib64": DetectLayout(root("usr/bin/nvidia-cuda-mps-control")),
	}
	if !layouts["chroot"].Chroot || layouts["no chroot, lib64"].Chroot || len(layouts["no chroot, lib64"].Env) != 2 {
		t.Fatalf("unexpected layouts: %+v", layouts)
	}
	gpus := []string{"GPU-0b6e4c8e-1111-2222-3333-444455556666", "MIG-0b6e4c8e-1111-2222-3333-444455557777"}
	pods := map[string]*corev1.Pod{}
	for name, l := range layouts {
		c := PodConfig{Namespace: ns, NodeName: "n1", Image: image, HostDriverRoot: hostRoot, Layout: l,
			Node: &metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: "n1", UID: "node-uid"}}
		for _, d := range []*sharing.MPSDaemon{
			{Dir: mpsDir, Devices: gpus, ActiveThreadPercentage: 100, PinnedMemoryLimits: []int64{20 << 30, 0}},
			{Group: 1, Dir: mpsDir + "/group-1", Devices: gpus[:1], ActiveThreadPercentage: 1, PinnedMemoryLimits: []int64{141 << 30}},
			{Group: 2, Dir: mpsDir + "/group-2", Devices: gpus[1:]},
		} {
			p := c.Pod(uid, d)
			p.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
			pods[name+", group "+p.Labels[GroupLabel]] = p
		}
	}
	return pods
}

// TestHelmMPSPodPolicyRules evaluates the chart's MPS daemon Pod policy with
// the API server's policy code, without a cluster: the
// plugin's token may create and delete only daemon Pods of its own node, of
// exactly the shape spec.go builds. The Pod is privileged: any other
// command, argument, mount or environment would run what the plugin wants
// on the node (a compromised plugin's way off its container).
func TestHelmMPSPodPolicyRules(t *testing.T) {
	const ns, uid, driver = "gpudra-system", "0b6e4c8e-0000-0000-0000-000000000001", "gpu.gpudra.io"
	const image, hostRoot = "registry.example.com/gpudra:t", "/run/nvidia/driver"
	// Rendered with helm (skipped without _output/tools/helm), release
	// gpudra in gpudra-system.
	v := chart.Policy(t, "gpudra-kubelet-plugin-mps-pods",
		"--set", "image.repository=registry.example.com/gpudra,image.tag=t,nvidiaDriverRoot="+hostRoot)
	plugin := &user.DefaultInfo{Name: "system:serviceaccount:" + ns + ":gpudra-kubelet-plugin",
		Extra: map[string][]string{"authentication.kubernetes.io/node-name": {"n1"}}}
	dir := "/var/lib/kubelet/plugins/" + driver + "/mps/" + uid
	built := mpsDaemonPods(t, ns, image, hostRoot, dir, uid)
	eval := func(t *testing.T, obj, old *corev1.Pod) (bool, []string) {
		var o, ol runtime.Object
		if obj != nil {
			o = obj
		}
		if old != nil {
			ol = old
		}
		return chart.EvalWriteAs(v, plugin, corev1.SchemeGroupVersion.WithResource("pods"), "Pod", o, ol)
	}
	for name, p := range built {
		t.Run("spec.go's Pod: "+name, func(t *testing.T) {
			if allowed, denials := eval(t, p, nil); !allowed {
				t.Errorf("create refused: %v", denials)
			}
			if allowed, denials := eval(t, nil, p); !allowed {
				t.Errorf("delete refused: %v", denials)
			}
		})
	}
	// Each edit starts from spec.go's Pod of the layout: chroot (a host
	// install) or not (GKE's bin and lib64).
	daemon := func(layout string, edit func(*corev1.Pod)) *corev1.Pod {
		p := built[layout+", group "].DeepCopy()
		if edit != nil {
			edit(p)
		}
		return p
	}
	ctr := func(p *corev1.Pod) *corev1.Container { return &p.Spec.Containers[0] }
	mount := func(p *corev1.Pod, name string) *corev1.VolumeMount {
		i := slices.IndexFunc(ctr(p).VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == name })
		return &ctr(p).VolumeMounts[i]
	}
	volume := func(p *corev1.Pod, name string) *corev1.Volume {
		i := slices.IndexFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == name })
		return &p.Spec.Volumes[i]
	}
	addArg := func(a string) func(*corev1.Pod) {
		return func(p *corev1.Pod) { ctr(p).Args = append(ctr(p).Args, a) }
	}
	setArg := func(prefix, a string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			for i, x := range ctr(p).Args {
				if len(x) >= len(prefix) && x[:len(prefix)] == prefix {
					ctr(p).Args[i] = a
				}
			}
		}
	}
	for _, tc := range []struct {
		name     string
		obj, old *corev1.Pod
		allowed  bool
	}{
		{"create a daemon Pod of its node", daemon("chroot", nil), nil, true},
		{"delete a daemon Pod of its node", nil, daemon("chroot", nil), true},
		{"create a daemon Pod of another node", daemon("chroot", func(p *corev1.Pod) {
			p.Spec.NodeName, p.Labels["gpudra.io/mps-node"] = "n2", "n2"
		}), nil, false},
		{"delete a daemon Pod of another node", nil, daemon("chroot", func(p *corev1.Pod) {
			p.Spec.NodeName, p.Labels["gpudra.io/mps-node"] = "n2", "n2"
		}), false},
		{"another image", daemon("chroot", func(p *corev1.Pod) { ctr(p).Image = "busybox" }), nil, false},
		{"another command", daemon("chroot", func(p *corev1.Pod) { ctr(p).Args = []string{"sh"} }), nil, false},
		{"host network", daemon("chroot", func(p *corev1.Pod) { p.Spec.HostNetwork = true }), nil, false},
		{"a ServiceAccount token", daemon("chroot", func(p *corev1.Pod) { p.Spec.AutomountServiceAccountToken = nil }), nil, false},
		{"a host path outside the driver root and the MPS directory", daemon("chroot", func(p *corev1.Pod) {
			volume(p, "pipe").HostPath.Path = "/etc"
		}), nil, false},
		{"another name", daemon("chroot", func(p *corev1.Pod) { p.Name = "workload" }), nil, false},
		{"a group suffix without its label", daemon("chroot", func(p *corev1.Pod) { p.Name = "gpudra-mps-" + uid + "-g1" }), nil, false},
		{"a group label that is no group number", daemon("chroot", func(p *corev1.Pod) {
			p.Name, p.Labels["gpudra.io/mps-group"] = "gpudra-mps-"+uid+"-gx", "x"
		}), nil, false},

		// Mounts: the driver root (the host's root by default) read-only
		// at /driver-root only; the MPS directories where the daemon looks.
		{"a writable driver-root mount", daemon("chroot", func(p *corev1.Pod) { mount(p, "driver-root").ReadOnly = false }), nil, false},
		{"a writable driver-root mount, unchrooted", daemon("no chroot, lib64", func(p *corev1.Pod) {
			mount(p, "driver-root").ReadOnly = false
		}), nil, false},
		{"the driver root mounted at another path", daemon("chroot", func(p *corev1.Pod) { mount(p, "driver-root").MountPath = "/host" }), nil, false},
		{"the driver root mounted a second time, read-only", daemon("chroot", func(p *corev1.Pod) {
			ctr(p).VolumeMounts = append(ctr(p).VolumeMounts, corev1.VolumeMount{Name: "driver-root", MountPath: "/host", ReadOnly: true})
		}), nil, false},
		{"the driver root with Bidirectional propagation", daemon("chroot", func(p *corev1.Pod) {
			prop := corev1.MountPropagationBidirectional
			mount(p, "driver-root").MountPropagation = &prop
		}), nil, false},
		{"a subPath of the driver root", daemon("chroot", func(p *corev1.Pod) { mount(p, "driver-root").SubPath = "etc" }), nil, false},
		{"an MPS directory mounted into the root's /etc", daemon("chroot", func(p *corev1.Pod) {
			mount(p, "pipe").MountPath = "/driver-root/etc"
		}), nil, false},
		{"an MPS directory at the chrooted paths without chroot", daemon("no chroot, lib64", func(p *corev1.Pod) {
			mount(p, "pipe").MountPath = "/driver-root/tmp/nvidia-mps"
		}), nil, false},
		{"the emptyDir over the root's /etc", daemon("chroot", func(p *corev1.Pod) { mount(p, "root-tmp").MountPath = "/driver-root/etc" }), nil, false},
		{"a hostPath volume that is no directory of the claim", daemon("chroot", func(p *corev1.Pod) {
			volume(p, "pipe").HostPath.Path = "/var/lib/kubelet/plugins/" + driver + "/mps/../../../../../etc"
		}), nil, false},

		// Arguments: the subcommand's grammar, with the daemon's own paths.
		{"--control into the MPS directory (plugin-writable)", daemon("chroot", setArg("--control=", "--control=/tmp/nvidia-mps/x")), nil, false},
		{"--control of another root binary", daemon("no chroot, lib64", setArg("--control=", "--control=/driver-root/bin/sh")), nil, false},
		{"--pipe-dir into the host root", daemon("chroot", setArg("--pipe-dir=", "--pipe-dir=/etc")), nil, false},
		{"--log-dir into the host root", daemon("no chroot, lib64", setArg("--log-dir=", "--log-dir=/driver-root/etc")), nil, false},
		{"--log-dir above its directory", daemon("chroot", setArg("--log-dir=", "--log-dir=/tmp/nvidia-mps-log/../../etc")), nil, false},
		{"--chroot elsewhere", daemon("chroot", setArg("--chroot=", "--chroot=/mps")), nil, false},
		{"an unknown flag", daemon("chroot", addArg("--start-timeout=1s")), nil, false},
		{"a klog flag that writes a file", daemon("chroot", addArg("--log-file=/driver-root/etc/x")), nil, false},
		{"a positional argument", daemon("chroot", addArg("/driver-root/etc")), nil, false},
		{"the subcommand twice", daemon("chroot", addArg(Subcommand)), nil, false},
		{"--devices with a path", daemon("chroot", setArg("--devices=", "--devices=GPU-1 /etc")), nil, false},
		{"a --set that is no MPS setting", daemon("chroot", addArg("--set=quit")), nil, false},
		{"a --set with a second command", daemon("chroot", addArg("--set=set_default_active_thread_percentage 50\nquit")), nil, false},
		{"a --set with shell syntax", daemon("chroot", addArg("--set=set_default_active_thread_percentage 50; rm -rf /")), nil, false},
		{"a --set out of range", daemon("chroot", addArg("--set=set_default_active_thread_percentage 101")), nil, false},
		{"a pinned memory limit not in MiB", daemon("chroot", addArg("--set=set_default_device_pinned_mem_limit 0 20G")), nil, false},
		{"a pinned memory limit of 0M (validation: at least 1Mi)", daemon("chroot", addArg("--set=set_default_device_pinned_mem_limit 0 0M")), nil, false},
		{"a pinned memory limit of 1Pi (validation's most)", daemon("chroot", addArg("--set=set_default_device_pinned_mem_limit 1 1073741824M")), nil, true},
		{"a device index that is no ordinal", daemon("chroot", addArg("--set=set_default_device_pinned_mem_limit GPU-1 1M")), nil, false},

		// Environment and what else could run in the container.
		{"LD_LIBRARY_PATH into the MPS directory", daemon("no chroot, lib64", func(p *corev1.Pod) {
			ctr(p).Env[1].Value = "/mps/pipe"
		}), nil, false},
		{"PATH into the MPS directory", daemon("no chroot, lib64", func(p *corev1.Pod) {
			ctr(p).Env[0].Value = "/mps/pipe:/usr/bin"
		}), nil, false},
		{"another variable", daemon("chroot", func(p *corev1.Pod) {
			ctr(p).Env = append(ctr(p).Env, corev1.EnvVar{Name: "LD_PRELOAD", Value: "/tmp/nvidia-mps/x.so"})
		}), nil, false},
		{"envFrom", daemon("chroot", func(p *corev1.Pod) {
			ctr(p).EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "x"}}}}
		}), nil, false},
		{"a postStart hook", daemon("chroot", func(p *corev1.Pod) {
			ctr(p).Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/driver-root/bin/sh"}}}}
		}), nil, false},
		{"an exec probe", daemon("chroot", func(p *corev1.Pod) {
			ctr(p).LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"/driver-root/bin/sh"}}}}
		}), nil, false},
		{"a shared process namespace", daemon("chroot", func(p *corev1.Pod) { p.Spec.ShareProcessNamespace = new(bool); *p.Spec.ShareProcessNamespace = true }), nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			allowed, denials := eval(t, tc.obj, tc.old)
			if allowed != tc.allowed {
				t.Errorf("allowed=%v, want %v; denials: %v", allowed, tc.allowed, denials)
			}
		})
	}
}
