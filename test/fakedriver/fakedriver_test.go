package fakedriver

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/gpudra/gpudra/internal/plugin/cdi"
	"github.com/gpudra/gpudra/internal/plugin/discovery"
	"github.com/gpudra/gpudra/internal/plugin/nvmllib"
	"github.com/gpudra/gpudra/test/sim"
)

const testNode = "node-a"

// requireRoot skips tests that create device nodes when not run as root.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("creating device nodes needs root")
	}
}

// testInputs returns Options with a stand-in simulated library (an ELF stub
// with NVML's SONAME) and stand-in fake tools.
func testInputs(t *testing.T, profile string) Options {
	t.Helper()
	in := t.TempDir()
	lib := filepath.Join(in, "libnvidia-ml-sim.so")
	require.NoError(t, os.WriteFile(lib, stubELF(NVMLSONAME), 0o755))
	for _, tool := range Tools {
		require.NoError(t, os.WriteFile(filepath.Join(in, tool), []byte("#!/bin/sh\necho "+tool+"\n"), 0o755))
	}
	return Options{Dir: filepath.Join(t.TempDir(), "root"), Profile: profile, Node: testNode, NVMLLibrary: lib, ToolsDir: in}
}

// simGPU is what the simulator says about one GPU, for comparison.
type simGPU struct {
	minor      int
	uuid       string
	busID      string
	pcieRoot   string
	numaNode   int // the PCI device's, -1 when unknown
	migCapable bool
}

func simulated(t *testing.T, profile string, profileDirs []string) (*sim.Server, []simGPU) {
	t.Helper()
	p, err := sim.Load(profile, profileDirs)
	require.NoError(t, err)
	srv := sim.NewServer(p, testNode)
	require.Equal(t, nvml.SUCCESS, srv.Init())
	t.Cleanup(func() { _ = srv.Shutdown() })
	var gpus []simGPU
	for i, g := range p.GPUs {
		dev, ret := srv.DeviceGetHandleByIndex(i)
		require.Equal(t, nvml.SUCCESS, ret)
		uuid, ret := dev.GetUUID()
		require.Equal(t, nvml.SUCCESS, ret)
		root, _ := srv.PCIeRoot(g.PCIBusID)
		numa, _ := srv.PCINUMANode(g.PCIBusID)
		gpus = append(gpus, simGPU{minor: g.Index, uuid: uuid, busID: g.PCIBusID, pcieRoot: root, numaNode: numa,
			migCapable: g.Model.MIGCapable()})
	}
	return srv, gpus
}

func requireCharDevice(t *testing.T, path string, major, minor int) {
	t.Helper()
	var st syscall.Stat_t
	require.NoError(t, syscall.Lstat(path, &st), path)
	require.Equal(t, uint32(syscall.S_IFCHR), st.Mode&syscall.S_IFMT, "%s is not a character device", path)
	require.Equal(t, major, Major(st.Rdev), "major of %s", path)
	require.Equal(t, minor, Minor(st.Rdev), "minor of %s", path)
}

func requireLink(t *testing.T, path, target string) {
	t.Helper()
	got, err := os.Readlink(path)
	require.NoError(t, err)
	require.Equal(t, target, got, path)
	_, err = os.Stat(path)
	require.NoError(t, err, "%s dangles", path)
}

func TestGenerateBuiltinProfiles(t *testing.T) {
	requireRoot(t)
	for _, profile := range sim.Builtin() {
		t.Run(profile, func(t *testing.T) {
			opts := testInputs(t, profile)
			require.NoError(t, Generate(opts))
			root := opts.Dir
			srv, gpus := simulated(t, profile, nil)
			version, _ := srv.SystemGetDriverVersion()
			lib := func(name string) string { return filepath.Join(root, LibDir, name) }

			cfg, err := ReadConfig(root)
			require.NoError(t, err)
			require.Equal(t, Config{Profile: profile, ProfileDirs: []string{}, Node: testNode,
				StateFile: "var/lib/gpudra-sim/nvml-state.json", FaultFile: "var/lib/gpudra-sim/faults",
				ProcessDir: "var/lib/gpudra-sim/processes"}, *cfg)

			requireLink(t, lib("libnvidia-ml.so.1"), "libnvidia-ml.so."+version)
			found, err := nvmllib.FindLibrary(root)
			require.NoError(t, err, "the plugin's library lookup")
			require.Equal(t, lib("libnvidia-ml.so."+version), found)
			want, _ := os.ReadFile(opts.NVMLLibrary)
			got, err := os.ReadFile(lib("libnvidia-ml.so." + version))
			require.NoError(t, err)
			require.Equal(t, want, got, "the simulated library is copied")
			for _, l := range StubLibraries {
				name := l.Base + ".so." + version
				f, err := elf.Open(lib(name))
				require.NoError(t, err)
				sonames, err := f.DynString(elf.DT_SONAME)
				_ = f.Close()
				require.NoError(t, err)
				if l.SONAME == "" {
					require.Equal(t, []string{name}, sonames)
					continue
				}
				require.Equal(t, []string{l.SONAME}, sonames)
				requireLink(t, lib(l.SONAME), name)
			}
			requireLink(t, lib("libcuda.so"), "libcuda.so.1")
			for _, fw := range FirmwareFiles {
				require.FileExists(t, filepath.Join(root, "lib/firmware/nvidia", version, fw))
			}
			for name := range Tools {
				fi, err := os.Stat(filepath.Join(root, BinDir, name))
				require.NoError(t, err)
				require.Equal(t, os.FileMode(0o755), fi.Mode().Perm())
			}
			fi, err := os.Stat(filepath.Join(root, RecordHook))
			require.NoError(t, err)
			require.Equal(t, os.FileMode(0o755), fi.Mode().Perm())
			// No nvidia-cdi-hook: like GPU Operator and GKE nodes, the root
			// has none, so specs that name a hook here would fail.
			require.NoFileExists(t, filepath.Join(root, BinDir, "nvidia-cdi-hook"))
			for _, name := range StubBinaries {
				fi, err := os.Stat(filepath.Join(root, BinDir, name))
				require.NoError(t, err)
				require.Equal(t, os.FileMode(0o755), fi.Mode().Perm())
			}

			requireCharDevice(t, filepath.Join(root, "dev/nvidiactl"), 120, 255)
			requireCharDevice(t, filepath.Join(root, "dev/nvidia-modeset"), 120, 254)
			requireCharDevice(t, filepath.Join(root, "dev/nvidia-uvm"), 121, 0)
			requireCharDevice(t, filepath.Join(root, "dev/nvidia-uvm-tools"), 121, 1)
			requireCharDevice(t, filepath.Join(root, "dev/nvidia-caps/nvidia-cap1"), 122, 1)
			requireCharDevice(t, filepath.Join(root, "dev/nvidia-caps/nvidia-cap2"), 122, 2)

			caps, err := cdi.NewProcMIGCaps(filepath.Join(root, "proc"), "/")
			require.NoError(t, err, "the plugin's reader of mig-minors and proc/devices")
			for _, g := range gpus {
				requireCharDevice(t, filepath.Join(root, fmt.Sprintf("dev/nvidia%d", g.minor)), 120, g.minor)
				info, err := os.ReadFile(filepath.Join(root, "proc/driver/nvidia/gpus", g.busID, "information"))
				require.NoError(t, err)
				require.Contains(t, string(info), "GPU UUID: \t "+g.uuid+"\n")
				require.Contains(t, string(info), fmt.Sprintf("Device Minor: \t %d\n", g.minor))

				// Every GPU has its mig-minors entries, numbered like the
				// simulated nodes' (cdi.SimulatedMIGCaps), with the caps major.
				for _, gi := range []int{0, 7, 14} {
					for _, ci := range []int{0, 7} {
						nodes, err := caps.Nodes(g.minor, gi, ci)
						require.NoError(t, err)
						simNodes, _ := cdi.SimulatedMIGCaps{}.Nodes(g.minor, gi, ci)
						for i, n := range nodes {
							require.Equal(t, simNodes[i].Path, n.Path)
							require.Equal(t, simNodes[i].Minor, n.Minor)
							require.Equal(t, int64(CapsMajor), n.Major)
							path := filepath.Join(root, n.Path)
							if g.migCapable {
								requireCharDevice(t, path, CapsMajor, int(n.Minor))
							} else {
								require.NoFileExists(t, path, "no capability nodes for a GPU without MIG")
							}
						}
					}
				}

				numa, err := os.ReadFile(filepath.Join(root, "sys/bus/pci/devices", g.busID, "numa_node"))
				require.NoError(t, err, "every GPU has its numa_node")
				require.Equal(t, fmt.Sprintf("%d\n", g.numaNode), string(numa), "numa_node of %s", g.busID)
				attr, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(g.busID, deviceattribute.WithFSFromRoot(filepath.Join(root, "sys")))
				if g.pcieRoot == "" {
					require.Error(t, err, "GPU %s has no PCIe root in the profile", g.busID)
					continue
				}
				require.NoError(t, err)
				require.Equal(t, g.pcieRoot, *attr.Value.StringValue, "PCIe root of %s", g.busID)
			}
			require.NoFileExists(t, filepath.Join(root, "dev/nvidia-caps-imex-channels"), "no IMEX channel nodes until someone creates them")
			entries, err := os.ReadDir(filepath.Join(root, "dev"))
			require.NoError(t, err)
			require.Len(t, entries, len(gpus)+7, "nvidia<N> per GPU, nvidiactl, nvidia-modeset, nvidia-uvm, nvidia-uvm-tools, nvidia-caps/, vfio/, shm/")
			require.DirExists(t, filepath.Join(root, "dev/shm"), "a whole-system root has the mount point of a chrooted MPS daemon's /dev/shm")
			vfioNodes, err := os.ReadDir(filepath.Join(root, "dev/vfio"))
			require.NoError(t, err)
			require.Len(t, vfioNodes, len(gpus)+1, "an IOMMU group node per GPU and dev/vfio/vfio")
		})
	}
}

func TestGenerateRefresh(t *testing.T) {
	requireRoot(t)
	opts := testInputs(t, "dgx-h100")
	require.NoError(t, Generate(opts))
	state := map[string]string{
		StateFile:                            `{"gpus":[]}`,
		FaultFile:                            "gpu-1 ecc\n",
		"var/lib/gpudra-sim/timeslice/GPU-x": "2\n",
	}
	for rel, content := range state {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(opts.Dir, rel)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(opts.Dir, rel), []byte(content), 0o644))
	}
	require.FileExists(t, filepath.Join(opts.Dir, "dev/nvidia7"))
	fi, err := os.Stat(filepath.Join(opts.Dir, "tmp"))
	require.NoError(t, err, "a whole-system root has /tmp")
	require.Equal(t, os.ModeDir|os.ModeSticky|0o777, fi.Mode(), "world-writable and sticky, as /tmp is")
	// What the runtime leaves there when a chrooted MPS daemon Pod mounts
	// its pipe directory into the root is no reason to refuse the root.
	require.NoError(t, os.MkdirAll(filepath.Join(opts.Dir, "tmp/nvidia-mps"), 0o755))

	// Same profile again, then a smaller one: what the old profile had goes.
	require.NoError(t, Generate(opts))
	opts.Profile = "l4"
	require.NoError(t, Generate(opts))
	for rel, content := range state {
		b, err := os.ReadFile(filepath.Join(opts.Dir, rel))
		require.NoError(t, err)
		require.Equal(t, content, string(b), "%s survives a refresh", rel)
	}
	_, gpus := simulated(t, "l4", nil)
	_, err = os.Lstat(filepath.Join(opts.Dir, fmt.Sprintf("dev/nvidia%d", len(gpus))))
	require.ErrorIs(t, err, os.ErrNotExist, "device nodes of the old profile are gone")
	cfg, err := ReadConfig(opts.Dir)
	require.NoError(t, err)
	require.Equal(t, "l4", cfg.Profile)
	matches, err := filepath.Glob(filepath.Join(opts.Dir, "usr/lib/x86_64-linux-gnu/libcuda.so.*.*"))
	require.NoError(t, err)
	require.Len(t, matches, 1, "only the current driver version's libraries")
}

func TestGenerateNewStateDir(t *testing.T) {
	requireRoot(t)
	opts := testInputs(t, "l4")
	require.NoError(t, Generate(opts))
	b, err := os.ReadFile(filepath.Join(opts.Dir, FaultFile))
	require.NoError(t, err)
	faults, err := sim.ParseFaults(string(b))
	require.NoError(t, err)
	require.Empty(t, faults, "a new root's fault file injects nothing")
}

func TestGenerateProfileFile(t *testing.T) {
	requireRoot(t)
	// A profile file without a name takes its name, and so its UUIDs, from
	// the file name: the copy in the root must keep it.
	data, err := os.ReadFile("../../test/sim/profiles/mixed.yaml")
	require.NoError(t, err)
	var lines []string
	for _, l := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(l, "name:") {
			lines = append(lines, l)
		}
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "rack7.yaml")
	require.NoError(t, os.WriteFile(file, []byte(strings.Join(lines, "\n")), 0o644))

	tests := []struct {
		name        string
		profile     string
		profileDirs []string
	}{
		{"path", file, nil},
		{"name in a profile dir", "rack7", []string{dir}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := testInputs(t, tc.profile)
			opts.ProfileDirs = tc.profileDirs
			require.NoError(t, Generate(opts))
			cfg, err := ReadConfig(opts.Dir)
			require.NoError(t, err)
			require.Equal(t, "etc/gpudra-sim/profiles/rack7.yaml", cfg.Profile)
			require.Empty(t, cfg.ProfileDirs)
			_, want := simulated(t, tc.profile, tc.profileDirs)
			_, got := simulated(t, filepath.Join(opts.Dir, cfg.Profile), nil)
			require.Equal(t, want, got, "the root's copy simulates the same GPUs")

			// Refreshing from the copy inside the root works too.
			opts.Profile, opts.ProfileDirs = filepath.Join(opts.Dir, cfg.Profile), nil
			require.NoError(t, Generate(opts))
			require.FileExists(t, filepath.Join(opts.Dir, cfg.Profile))
		})
	}
}

func TestGenerateRefuses(t *testing.T) {
	requireRoot(t)
	tests := []struct {
		name    string
		modify  func(t *testing.T, o *Options)
		wantErr string
	}{
		{"no dir", func(t *testing.T, o *Options) { o.Dir = "" }, "--dir"},
		{"system root", func(t *testing.T, o *Options) { o.Dir = "/" }, "refusing to generate a fake driver root in /"},
		{"no node", func(t *testing.T, o *Options) { o.Node = "" }, "--node"},
		{"no profile", func(t *testing.T, o *Options) { o.Profile = "" }, "--profile"},
		{"unknown profile", func(t *testing.T, o *Options) { o.Profile = "nope" }, `unknown simulation profile "nope"`},
		{"no library", func(t *testing.T, o *Options) { o.NVMLLibrary = filepath.Join(t.TempDir(), "x.so") }, "make sim-nvml-lib"},
		{"no tools", func(t *testing.T, o *Options) { o.ToolsDir = t.TempDir() }, "fake tool gpudra-fake-imex not found"},
		{"foreign directory", func(t *testing.T, o *Options) {
			require.NoError(t, os.MkdirAll(filepath.Join(o.Dir, "home"), 0o755))
		}, `it holds "home"`},
		{"unmarked directory", func(t *testing.T, o *Options) {
			require.NoError(t, os.MkdirAll(filepath.Join(o.Dir, "usr/bin"), 0o755))
		}, "has neither etc/gpudra-sim/config.json nor var/lib/gpudra-sim"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := testInputs(t, "l4")
			tc.modify(t, &opts)
			require.ErrorContains(t, Generate(opts), tc.wantErr)
		})
	}
}

func TestMkdev(t *testing.T) {
	for _, tc := range []struct{ major, minor int }{{120, 0}, {120, 255}, {122, 256}, {122, 4321}, {121, 1}, {4096, 1 << 19}} {
		dev := uint64(Mkdev(tc.major, tc.minor))
		require.Equal(t, tc.major, Major(dev), "%+v", tc)
		require.Equal(t, tc.minor, Minor(dev), "%+v", tc)
	}
	require.Equal(t, 120<<8|5, Mkdev(120, 5), "the classic encoding for small numbers")
}

func TestMIGCaps(t *testing.T) {
	caps := MIGCaps([]int{1, 0})
	require.Len(t, caps, 2+2*migMinorsPerGPU)
	require.Equal(t, []MIGCap{{"config", 1}, {"monitor", 2}, {"gpu0/gi0/access", 3}, {"gpu0/gi0/ci0/access", 4}}, caps[:4])
	require.Equal(t, MIGCap{"gpu0/gi14/ci7/access", 137}, caps[2+migMinorsPerGPU-1])
	require.Equal(t, MIGCap{"gpu1/gi0/access", 138}, caps[2+migMinorsPerGPU])
	// Only the listed GPUs, numbered by minor.
	require.Equal(t, MIGCap{"gpu5/gi0/access", 3 + 5*135}, MIGCaps([]int{5})[2])
}

// TestGenerateNUMANode: every GPU's PCI device has its numa_node, also
// without a PCIe root in the profile, and discovery reads the profile's
// node from it (the simulated NVML answers nvmlDeviceGetNumaNodeId
// NOT_SUPPORTED, as on x86); -1 gives no numaNode.
func TestGenerateNUMANode(t *testing.T) {
	requireRoot(t)
	file := filepath.Join(t.TempDir(), "numa.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`driverVersion: "570.124.06"
cudaDriverVersion: "12.8"
gpus:
  - model: l4
    count: 3
    devices:
      - {pciBusID: "0000:17:00.0", numaNode: 1}
      - {pciBusID: "0000:18:00.0", numaNode: -1}
      - {pciBusID: "0000:65:00.0", numaNode: 0, pcieRoot: pci0000:64}
`), 0o644))
	opts := testInputs(t, file)
	require.NoError(t, Generate(opts))
	srv, _ := simulated(t, file, nil)
	node, err := discovery.Discover(t.Context(), struct{ nvml.Interface }{srv},
		discovery.Options{SysfsRoot: filepath.Join(opts.Dir, "sys")})
	require.NoError(t, err)
	require.Len(t, node.GPUs, 3)
	var got []any
	for _, g := range node.GPUs {
		if g.NUMANode == nil {
			got = append(got, nil)
		} else {
			got = append(got, *g.NUMANode)
		}
	}
	require.Equal(t, []any{1, nil, 0}, got)
	require.Equal(t, []string{"", "", "pci0000:64"}, []string{node.GPUs[0].PCIeRoot, node.GPUs[1].PCIeRoot, node.GPUs[2].PCIeRoot})
}
