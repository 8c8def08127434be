package localcluster

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

func TestNodeGroupFor(t *testing.T) {
	for _, tc := range []struct {
		flags   []string
		want    NodeGroup
		wantErr bool
	}{
		{[]string{"--gpu-sharing=consumable", "--mig=static"}, NodeGroup{Name: "gpu-share",
			NodeSelector: map[string]string{PluginProfileLabel: "gpu-share"}, MIG: "static", ExtraArgs: []string{"--gpu-sharing=consumable"}}, false},
		{[]string{"--v=6"}, NodeGroup{Name: "gpu-share",
			NodeSelector: map[string]string{PluginProfileLabel: "gpu-share"}, ExtraArgs: []string{"--v=6"}}, false},
		{[]string{"mig=static"}, NodeGroup{}, true},
	} {
		got, err := NodeGroupFor("gpu-share", tc.flags)
		if (err != nil) != tc.wantErr {
			t.Fatalf("%v: err=%v, want error %v", tc.flags, err, tc.wantErr)
		}
		if err == nil && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%v: got %+v, want %+v", tc.flags, got, tc.want)
		}
	}
}

func TestHostPathOf(t *testing.T) {
	n := Layout{"/c"}.Node("gpu-a")
	for in, want := range map[string]string{
		SimDriverRoot:                            "/c/nodes/gpu-a/driver-root",
		SimDriverRoot + "/usr/lib/x/libcuda.so":  "/c/nodes/gpu-a/driver-root/usr/lib/x/libcuda.so",
		"/var/run/cdi/gpu.json":                  "/c/nodes/gpu-a/fs/var/run/cdi/gpu.json",
		"/var/lib/kubelet/plugins/gpu.gpudra.io": "/c/nodes/gpu-a/fs/var/lib/kubelet/plugins/gpu.gpudra.io",
		"/var/lib/kubeletx":                      "/var/lib/kubeletx", // not below /var/lib/kubelet
		"/usr/bin/env":                           "/usr/bin/env",
	} {
		if got := n.HostPathOf(in); got != want {
			t.Errorf("HostPathOf(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestFreeSlotAndLabels(t *testing.T) {
	c := New(Config{Nodes: []NodeSpec{{Name: "a", Slot: 0}, {Name: "c", Slot: 2}}}, os.Stderr)
	if got := c.freeSlot(); got != 1 {
		t.Errorf("free slot %d, want 1 (the one a removed node left)", got)
	}
	if got := nodeLabelsFlag(map[string]string{"b": "2", "a": "1"}); got != "a=1,b=2" {
		t.Errorf("--node-labels %q", got)
	}
}

// TestNodeGroupsRenderDaemonSets renders the chart with the values file the
// harness writes for a node added with plugin flags: the group's DaemonSet
// runs on the node's label with the flags, the default one skips that label,
// and neither runs on a node whose plugin is stopped (PluginDisableLabel).
func TestNodeGroupsRenderDaemonSets(t *testing.T) {
	repo, _ := filepath.Abs(filepath.Join("..", ".."))
	cfg := DefaultConfig(repo)
	if _, err := os.Stat(cfg.Helm); err != nil {
		t.Skipf("no helm (%v): make %s builds it", err, cfg.Helm)
	}
	cfg.Dir = t.TempDir()
	g, err := NodeGroupFor("gpu-share", []string{"--gpu-sharing=consumable", "--mig=static"})
	if err != nil {
		t.Fatal(err)
	}
	cfg.NodeGroups = []NodeGroup{g}
	c := New(cfg, os.Stderr)
	if err := c.writeNodeGroupsValues(); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"template"}, c.HelmArgs()[2:]...) // not upgrade --install
	out, err := exec.Command(cfg.Helm, append(args, "--show-only", "templates/kubelet-plugin/daemonset.yaml")...).CombinedOutput()
	if err != nil {
		t.Fatalf("helm %v: %v\n%s", args, err, out)
	}
	byName := map[string]appsv1.DaemonSet{}
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var ds appsv1.DaemonSet
		if err := yaml.Unmarshal([]byte(doc), &ds); err != nil {
			t.Fatal(err)
		}
		if ds.Name != "" {
			byName[ds.Name] = ds
		}
	}
	def, ok1 := byName["gpudra-kubelet-plugin"]
	grp, ok2 := byName["gpudra-kubelet-plugin-gpu-share"]
	if !ok1 || !ok2 || len(byName) != 2 {
		t.Fatalf("DaemonSets %v, want the default and gpudra-kubelet-plugin-gpu-share", slices.Collect(maps.Keys(byName)))
	}
	stopped := corev1.NodeSelectorRequirement{Key: PluginDisableLabel, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"false"}}
	notGroup := corev1.NodeSelectorRequirement{Key: PluginProfileLabel, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"gpu-share"}}
	for _, tc := range []struct {
		ds          appsv1.DaemonSet
		want        []corev1.NodeSelectorRequirement
		selector    map[string]string
		args, notIn []string
	}{
		{def, []corev1.NodeSelectorRequirement{stopped, notGroup}, nil, []string{"--mig=dynamic"}, []string{"--gpu-sharing=consumable"}},
		{grp, []corev1.NodeSelectorRequirement{stopped}, map[string]string{PluginProfileLabel: "gpu-share"},
			[]string{"--mig=static", "--gpu-sharing=consumable"}, []string{"--mig=dynamic"}},
	} {
		spec := tc.ds.Spec.Template.Spec
		a := spec.Affinity
		if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
			t.Fatalf("%s: no required node affinity", tc.ds.Name)
		}
		terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
		if len(terms) != 1 || !reflect.DeepEqual(terms[0].MatchExpressions, tc.want) {
			t.Errorf("%s: node affinity terms %+v, want one term %+v", tc.ds.Name, terms, tc.want)
		}
		if !reflect.DeepEqual(spec.NodeSelector, tc.selector) {
			t.Errorf("%s: nodeSelector %v, want %v", tc.ds.Name, spec.NodeSelector, tc.selector)
		}
		got := spec.Containers[0].Args
		for _, w := range tc.args {
			if !slices.Contains(got, w) {
				t.Errorf("%s: args %v lack %s", tc.ds.Name, got, w)
			}
		}
		for _, w := range tc.notIn {
			if slices.Contains(got, w) {
				t.Errorf("%s: args %v have %s", tc.ds.Name, got, w)
			}
		}
	}
	if sel := grp.Spec.Selector.MatchLabels["gpudra.io/kubelet-plugin-group"]; sel != "gpu-share" {
		t.Errorf("the group's DaemonSet selects %v, want its own pods (gpudra.io/kubelet-plugin-group=gpu-share)", grp.Spec.Selector.MatchLabels)
	}
}
