package cdplugin

import (
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/gpudra/gpudra/internal/shared/compat"
	"github.com/gpudra/gpudra/test/chart"
)

const (
	enabled    = "computeDomains.enabled=true"
	pluginUser = "system:serviceaccount:gpudra-system:gpudra-kubelet-plugin"
)

// chartView is what the chart renders for the channel plugin.
type chartView struct {
	pods    []corev1.PodSpec
	classes map[string]string // DeviceClass name -> CEL of the channel driver's classes
	groups  []string          // API groups whose computedomains the plugin may read
	nodeOps []string          // verbs on nodes
}

func renderChart(t *testing.T, args ...string) chartView {
	t.Helper()
	objs := chart.Render(t, args...)
	v := chartView{classes: map[string]string{}}
	for _, o := range chart.OfKind(objs, "DaemonSet") {
		ds := &appsv1.DaemonSet{}
		require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o, ds))
		if strings.HasSuffix(ds.Name, "-kubelet-plugin") {
			v.pods = append(v.pods, ds.Spec.Template.Spec)
		}
	}
	for _, o := range chart.OfKind(objs, "DeviceClass") {
		c := &resourceapi.DeviceClass{}
		require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o, c))
		if strings.HasPrefix(c.Name, "compute-domain-") {
			require.Len(t, c.Spec.Selectors, 1)
			v.classes[c.Name] = c.Spec.Selectors[0].CEL.Expression
		}
	}
	for _, o := range chart.OfKind(objs, "ClusterRole") {
		cr := &rbacv1.ClusterRole{}
		require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o, cr))
		if cr.Name != "gpudra-kubelet-plugin" {
			continue
		}
		for _, r := range cr.Rules {
			if slices.Contains(r.Resources, "computedomains") {
				assert.Equal(t, []string{"get", "list", "watch"}, r.Verbs)
				v.groups = append(v.groups, r.APIGroups...)
			}
			if slices.Contains(r.Resources, "nodes") {
				v.nodeOps = append(v.nodeOps, r.Verbs...)
			}
		}
	}
	return v
}

func container(pod corev1.PodSpec, name string) *corev1.Container {
	for i := range pod.Containers {
		if pod.Containers[i].Name == name {
			return &pod.Containers[i]
		}
	}
	return nil
}

func TestChartOff(t *testing.T) {
	v := renderChart(t)
	require.NotEmpty(t, v.pods)
	for _, pod := range v.pods {
		assert.Len(t, pod.Containers, 1, "no compute-domain container by default")
		for _, vol := range pod.Volumes {
			assert.NotEqual(t, "compute-domain-data", vol.Name)
		}
	}
	assert.Empty(t, v.classes)
	assert.Empty(t, v.groups)
	assert.Equal(t, []string{"get"}, v.nodeOps, "the plugin may not patch nodes")
	for _, o := range chart.OfKind(chart.Render(t), "ValidatingAdmissionPolicy") {
		assert.NotContains(t, o["metadata"].(map[string]any)["name"], "compute-domain")
	}
}

func TestChartOn(t *testing.T) {
	for _, tc := range []struct {
		mode   string
		args   []string
		groups []string
	}{
		{"native", []string{"--set", enabled}, []string{"resource.gpudra.io"}},
		{"nvidia", []string{"--set", enabled, "--set", "compatibility=nvidia"}, []string{"resource.gpudra.io", "resource.nvidia.com"}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			names := compat.Default()
			if tc.mode == "nvidia" {
				names = compat.Names{Mode: compat.NVIDIA}
			}
			cd := names.ComputeDomain()
			v := renderChart(t, tc.args...)
			require.NotEmpty(t, v.pods)
			for _, pod := range v.pods {
				c := container(pod, "compute-domain")
				require.NotNil(t, c, "the channel plugin runs beside the GPU plugin")
				assert.Equal(t, []string{"/usr/local/bin/gpu-kubelet-plugin", "compute-domain"}, c.Command)
				assert.Equal(t, container(pod, "plugin").Image, c.Image)
				// Its flags are the command's, and name the mode's driver.
				o := &Options{}
				fs := pflag.NewFlagSet("compute-domain", pflag.ContinueOnError)
				o.AddFlags(fs)
				var args []string
				for _, a := range c.Args {
					if !strings.HasPrefix(a, "--v=") {
						args = append(args, a)
					}
				}
				require.NoError(t, fs.Parse(append(args, "--node-name=n", "--namespace=gpudra-system")))
				require.NoError(t, o.Validate())
				assert.Equal(t, "/var/lib/kubelet/plugins/"+cd.Driver, o.PluginDataDir())
				assert.Equal(t, "/driver-root", o.NvidiaDriverRoot)
				assert.Equal(t, ":8082", o.HealthAddress)
				require.NotNil(t, c.ReadinessProbe)
				assert.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
				assert.Equal(t, 8082, c.ReadinessProbe.HTTPGet.Port.IntValue())
				assert.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
				envs := map[string]string{}
				for _, e := range c.Env {
					envs[e.Name] = e.ValueFrom.FieldRef.FieldPath
				}
				assert.Equal(t, "spec.nodeName", envs["NODE_NAME"])
				assert.Equal(t, "metadata.namespace", envs["POD_NAMESPACE"])

				require.NotNil(t, c.SecurityContext.Capabilities)
				assert.Equal(t, []corev1.Capability{"MKNOD"}, c.SecurityContext.Capabilities.Add)
				if p := container(pod, "plugin").SecurityContext; p.Capabilities != nil {
					assert.NotContains(t, p.Capabilities.Add, corev1.Capability("MKNOD"), "CAP_MKNOD only for the channel plugin")
				}
				mounts := map[string]string{}
				for _, m := range c.VolumeMounts {
					mounts[m.MountPath] = m.Name
					if m.MountPath == "/driver-root" {
						assert.False(t, m.ReadOnly, "channel nodes are created under a driver root's own dev/")
					}
				}
				for _, p := range []string{o.PluginDataDir(), o.KubeletRegistrarDir, o.CDIRoot, "/driver-root", "/dev"} {
					assert.Contains(t, mounts, p)
				}
				hostPaths := map[string]string{}
				for _, vol := range pod.Volumes {
					if vol.HostPath != nil {
						hostPaths[vol.Name] = vol.HostPath.Path
					}
				}
				assert.Equal(t, o.PluginDataDir(), hostPaths[mounts[o.PluginDataDir()]], "the data dir at the host's path")
			}
			assert.Equal(t, map[string]string{
				cd.ChannelClass: `device.driver == "` + cd.Driver + `" && device.attributes["` + cd.Driver + `"].type == "channel" && device.attributes["` + cd.Driver + `"].id == 0`,
				cd.DaemonClass:  `device.driver == "` + cd.Driver + `" && device.attributes["` + cd.Driver + `"].type == "daemon"`,
			}, v.classes)
			assert.Equal(t, tc.groups, v.groups)
			assert.ElementsMatch(t, []string{"get", "patch"}, v.nodeOps)
		})
	}
}

func nodeObj(name string, labels map[string]string) *corev1.Node {
	return &corev1.Node{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

// The node label policy: the plugin's token labels only its own node, and
// only with the ComputeDomain label.
func TestChartNodeLabelPolicy(t *testing.T) {
	policy := chart.Policy(t, "gpudra-kubelet-plugin-compute-domain-node-label", "--set", enabled)
	label := compat.Default().ComputeDomain().Label
	gvr := corev1.SchemeGroupVersion.WithResource("nodes")
	as := func(node string) user.Info {
		u := &user.DefaultInfo{Name: pluginUser}
		if node != "" {
			u.Extra = map[string][]string{"authentication.kubernetes.io/node-name": {node}}
		}
		return u
	}
	base := map[string]string{"kubernetes.io/hostname": "n1"}
	with := func(extra map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range base {
			out[k] = v
		}
		for k, v := range extra {
			out[k] = v
		}
		return out
	}
	tainted := nodeObj("n1", with(map[string]string{label: "u1"}))
	tainted.Spec.Unschedulable = true
	for _, tc := range []struct {
		name     string
		u        user.Info
		obj, old *corev1.Node
		allowed  bool
	}{
		{"add the label on its node", as("n1"), nodeObj("n1", with(map[string]string{label: "u1"})), nodeObj("n1", base), true},
		{"remove the label on its node", as("n1"), nodeObj("n1", base), nodeObj("n1", with(map[string]string{label: "u1"})), true},
		{"label another node", as("n1"), nodeObj("n2", with(map[string]string{label: "u1"})), nodeObj("n2", base), false},
		{"a token without a node", as(""), nodeObj("n1", with(map[string]string{label: "u1"})), nodeObj("n1", base), false},
		{"change another label", as("n1"), nodeObj("n1", map[string]string{"kubernetes.io/hostname": "x"}), nodeObj("n1", base), false},
		{"add another label", as("n1"), nodeObj("n1", with(map[string]string{"gpu": "yes"})), nodeObj("n1", base), false},
		{"remove another label", as("n1"), nodeObj("n1", nil), nodeObj("n1", base), false},
		{"change the spec", as("n1"), tainted, nodeObj("n1", base), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, denials := chart.EvalWriteAs(policy, tc.u, gvr, "Node", tc.obj, tc.old)
			assert.Equal(t, tc.allowed, ok, "%v", denials)
		})
	}
	// Other users are not this policy's business.
	ok, _ := chart.EvalWriteAs(policy, &user.DefaultInfo{Name: "admin"}, gvr, "Node", nodeObj("n2", nil), nodeObj("n2", base))
	assert.True(t, ok)
}

// The slice policy lets the plugin's token publish the channel driver's
// slices of its own node only when the channel plugin is on.
func TestChartSlicePolicy(t *testing.T) {
	gvr := resourceapi.SchemeGroupVersion.WithResource("resourceslices")
	node := "n1"
	slice := func(driver, pool string) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{TypeMeta: metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceSlice"},
			ObjectMeta: metav1.ObjectMeta{Name: pool + "-" + driver},
			Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: &node,
				Pool: resourceapi.ResourcePool{Name: pool, Generation: 1, ResourceSliceCount: 1}}}
	}
	u := &user.DefaultInfo{Name: pluginUser, Extra: map[string][]string{"authentication.kubernetes.io/node-name": {node}}}
	cd := compat.Default().ComputeDomain().Driver
	on := chart.Policy(t, "gpudra-kubelet-plugin-resourceslices", "--set", enabled)
	off := chart.Policy(t, "gpudra-kubelet-plugin-resourceslices")
	for _, tc := range []struct {
		name    string
		on, off bool
		obj     *resourceapi.ResourceSlice
	}{
		{"channel driver, own pool", true, false, slice(cd, "n1")},
		{"channel driver, another pool", false, false, slice(cd, "n2")},
		{"GPU driver, own pool", true, true, slice("gpu.gpudra.io", "n1")},
		{"another driver", false, false, slice("other.example.com", "n1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, denials := chart.EvalWriteAs(on, u, gvr, "ResourceSlice", tc.obj, nil)
			assert.Equal(t, tc.on, ok, "on: %v", denials)
			ok, denials = chart.EvalWriteAs(off, u, gvr, "ResourceSlice", tc.obj, nil)
			assert.Equal(t, tc.off, ok, "off: %v", denials)
			ok, denials = chart.EvalWriteAs(on, u, gvr, "ResourceSlice", nil, tc.obj)
			assert.Equal(t, tc.on, ok, "delete, on: %v", denials)
		})
	}
}

func TestChartHealthPortOff(t *testing.T) {
	v := renderChart(t, "--set", enabled, "--set", "computeDomains.healthPort=0")
	require.NotEmpty(t, v.pods)
	for _, pod := range v.pods {
		c := container(pod, "compute-domain")
		require.NotNil(t, c)
		assert.Nil(t, c.ReadinessProbe)
		assert.Empty(t, c.Ports)
		for _, a := range c.Args {
			assert.NotContains(t, a, "--health-address")
		}
	}
}
