package localcluster

import (
	"reflect"
	"strings"
	"testing"
)

func TestNodeRuntime(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		wantErr  bool
	}{
		{"", RuntimeContainerd, false},
		{"containerd", RuntimeContainerd, false},
		{"crio", RuntimeCRIO, false},
		{"cri-o", "", true},
		{"docker", "", true},
	} {
		got, err := nodeRuntime(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("nodeRuntime(%q) = %q, %v; want %q, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestNodeFlags(t *testing.T) {
	for _, tc := range []struct {
		name       string
		flags      []string
		wantSpec   NodeSpec
		wantPlugin []string
		wantErr    bool
	}{
		{name: "none", wantSpec: NodeSpec{Name: "n"}},
		{name: "runtime is no plugin flag", flags: []string{"--runtime=crio"},
			wantSpec: NodeSpec{Name: "n", Runtime: "crio"}},
		{name: "layout stays a plugin flag", flags: []string{"--layout=gke", "--runtime=crio", "--mig=static"},
			wantSpec:   NodeSpec{Name: "n", Layout: "gke", Runtime: "crio"},
			wantPlugin: []string{"--layout=gke", "--mig=static"}},
		{name: "unknown runtime", flags: []string{"--runtime=docker"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, plugin, err := nodeFlags(NodeSpec{Name: "n"}, tc.flags)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err=%v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if !reflect.DeepEqual(spec, tc.wantSpec) || !reflect.DeepEqual(plugin, tc.wantPlugin) {
				t.Errorf("got %+v %q, want %+v %q", spec, plugin, tc.wantSpec, tc.wantPlugin)
			}
		})
	}
}

// runtimeTestCluster has a containerd node and a CRI-O node.
func runtimeTestCluster(t *testing.T) *Cluster {
	cfg := DefaultConfig(t.TempDir())
	cfg.HostIP = "192.0.2.10"
	cfg.Nodes = []NodeSpec{{Name: "gpu-c", Profile: "l4"}, {Name: "gpu-o", Profile: "l4", Slot: 1, Runtime: RuntimeCRIO}}
	return New(cfg, nil)
}

func TestNodeRuntimeFiles(t *testing.T) {
	c := runtimeTestCluster(t)
	for _, tc := range []struct {
		node, component, socket, hostSocket string
		nriFlag                             bool
	}{
		{"gpu-c", "containerd-gpu-c", ContainerdSocket, "nodes/gpu-c/fs/run/containerd/containerd.sock", false},
		{"gpu-o", "crio-gpu-o", CRIOSocket, "nodes/gpu-o/fs/run/crio/crio.sock", true},
		// Not recorded (yet): containerd.
		{"gpu-x", "containerd-gpu-x", ContainerdSocket, "nodes/gpu-x/fs/run/containerd/containerd.sock", false},
	} {
		t.Run(tc.node, func(t *testing.T) {
			if got := c.runtimeName(tc.node); got != tc.component {
				t.Errorf("component %q, want %q", got, tc.component)
			}
			if got, want := c.hostSocket(tc.node), c.Dir+"/"+tc.hostSocket; got != want {
				t.Errorf("host socket %q, want %q", got, want)
			}
			if kc := c.kubeletConfig(tc.node, 0); !strings.Contains(kc, "containerRuntimeEndpoint: unix://"+tc.socket+"\n") ||
				!strings.Contains(kc, "imageServiceEndpoint: unix://"+tc.socket+"\n") {
				t.Errorf("kubelet config does not name %s:\n%s", tc.socket, kc)
			}
			layout, _ := driverLayout("")
			if got := strings.Contains(c.nriScript(c.spec(tc.node), layout), " --restrict-oom-score-adj"); got != tc.nriFlag {
				t.Errorf("NRI script has --restrict-oom-score-adj: %v, want %v", got, tc.nriFlag)
			}
		})
	}
}

func TestCRIOConfig(t *testing.T) {
	c := runtimeTestCluster(t)
	conf := c.crioConfig(c.Node("gpu-o"))
	for _, want := range []string{
		`listen = "` + CRIOSocket + `"`,
		`root = "` + CRIOStorageRoot + `"`,
		`runroot = "` + CRIOStorageRunRoot + `"`,
		`storage_driver = "` + CRIOStorageDriver + `"`,
		`cdi_spec_dirs = ["` + CDIDir + `", "/etc/cdi"]`,
		`default_runtime = "runc"`,
		`runtime_path = "/usr/sbin/runc"`,
		`monitor_path = "/usr/bin/conmon"`,
		`cgroup_manager = "cgroupfs"`,
		`pinns_path = "` + c.bin("pinns") + `"`,
		`network_dir = "` + CNIConfDir + `"`,
		`nri_listen = "` + CRIONRISocket + `"`,
		`nri_plugin_dir = "` + c.Node("gpu-o").nriPluginDir() + `"`,
		"enable_nri = true",
	} {
		if !strings.Contains(conf, want+"\n") {
			t.Errorf("crio.conf lacks %s:\n%s", want, conf)
		}
	}
	// Every state directory CRI-O writes is one of the node's own.
	for _, line := range strings.Split(conf, "\n") {
		k, v, ok := strings.Cut(line, " = ")
		if !ok || !strings.HasPrefix(v, `"/`) || strings.HasSuffix(k, "_path") || k == "nri_plugin_dir" {
			continue
		}
		if p := strings.Trim(v, `"`); c.Node("gpu-o").HostPathOf(p) == p {
			t.Errorf("%s = %s is the host's own path, not one of the node's directories", k, v)
		}
	}
}

func TestConfigCompleteChecksRuntimes(t *testing.T) {
	for _, tc := range []struct {
		runtime string
		wantErr bool
	}{{"", false}, {RuntimeCRIO, false}, {"docker", true}} {
		cfg := DefaultConfig(t.TempDir())
		cfg.HostIP = "192.0.2.10"
		cfg.Nodes[0].Runtime = tc.runtime
		if err := cfg.complete(); (err != nil) != tc.wantErr {
			t.Errorf("runtime %q: err=%v, want error %v", tc.runtime, err, tc.wantErr)
		}
	}
}
