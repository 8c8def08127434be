package localcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpudra/gpudra/test/images"
)

// Paths inside a node that runs CRI-O (its mount namespace). /run/crio,
// /var/lib/crio and the image store's directories are nodeBinds.
const (
	CRIOSocket    = "/run/crio/crio.sock"
	CRIONRISocket = "/run/crio/nri.sock"
	// The image store (containers/storage), shared with gpudra-crio-import.
	CRIOStorageRoot    = "/var/lib/containers/storage"
	CRIOStorageRunRoot = "/run/containers/storage"
	CRIOStorageDriver  = "overlay"
)

// HugePagesDir is where the kernel lists its huge page sizes. The kubelet
// gives every container a hugetlb limit per size listed there, CRI-O passes
// them on whenever the kernel has the controller, and runc then fails on a
// hybrid cgroup host whose hugetlb controller is in no v1 hierarchy
// ("cannot set hugetlb limit: container could not join or create cgroup";
// containerd tolerates it by default: tolerate_missing_hugetlb_controller,
// disable_hugetlb_controller). A CRI-O node gets an empty directory there,
// as on a kernel without huge pages, so that no limits are asked for.
const HugePagesDir = "/sys/kernel/mm/hugepages"

// crioImportBinary fills a CRI-O node's image store from the OCI tarballs
// (hack/crio/cmd/gpudra-crio-import, built by make crio).
const crioImportBinary = "gpudra-crio-import"

// CRIOConfig is the node's crio.conf; CRIOConfigDir an empty drop-in
// directory, so that no /etc/crio/crio.conf.d of the host applies.
func (n NodeLayout) CRIOConfig() string    { return filepath.Join(n.Dir, "crio.conf") }
func (n NodeLayout) CRIOConfigDir() string { return filepath.Join(n.Dir, "crio.conf.d") }

// NoHugePagesDir is the empty directory a CRI-O node sees at HugePagesDir.
func (n NodeLayout) NoHugePagesDir() string { return filepath.Join(n.Dir, "no-hugepages") }

// crioConfig is the node's CRI-O configuration: Debian's runc through
// Debian's conmon, cgroupfs under the kubelet's cgroup root, CDI specs from
// the directory the plugin writes, the pause image of make images, the
// node's CNI bridge, and NRI with the node's plugin directory (nri.go).
// Not Debian's crun: crun 1.8.1 refuses the OCI spec CRI-O 1.34 writes
// ("container create failed: unknown version specified").
func (c *Cluster) crioConfig(n NodeLayout) string {
	return fmt.Sprintf(`[crio]
root = %[1]q
runroot = %[2]q
storage_driver = %[3]q
log_dir = "/var/lib/crio/pod-logs"
version_file = "/run/crio/version"
version_file_persist = "/var/lib/crio/version"
clean_shutdown_file = "/var/lib/crio/clean.shutdown"

[crio.api]
listen = %[4]q

[crio.runtime]
default_runtime = "runc"
cgroup_manager = "cgroupfs"
# Pods get no infra (pause) container unless they share a PID namespace:
# pinns holds their namespaces.
drop_infra_ctr = true
pinns_path = %[5]q
namespaces_dir = "/run/crio/ns"
container_exits_dir = "/run/crio/exits"
container_attach_socket_dir = "/run/crio"
cdi_spec_dirs = [%[6]q, "/etc/cdi"]
# No directory of the host's: CRI-O creates the ones it is given.
hooks_dir = ["/var/lib/crio/hooks.d"]
decryption_keys_path = "/var/lib/crio/keys"

[crio.runtime.runtimes.runc]
runtime_path = %[7]q
runtime_type = "oci"
runtime_root = "/run/crio/runc"
monitor_path = %[8]q
monitor_cgroup = "pod"

[crio.image]
pause_image = %[9]q
signature_policy_dir = "/var/lib/crio/policies"

[crio.network]
network_dir = %[10]q
plugin_dirs = [%[11]q]

[crio.nri]
enable_nri = true
nri_listen = %[12]q
nri_plugin_dir = %[13]q
`, CRIOStorageRoot, CRIOStorageRunRoot, CRIOStorageDriver, CRIOSocket, c.bin("pinns"), CDIDir,
		c.cfg.Runc, c.cfg.Conmon, images.PauseImage, CNIConfDir, c.cfg.CNIBinDir, CRIONRISocket, n.nriPluginDir())
}

// crioMissing lists what a CRI-O node needs and this host lacks.
func (c *Cluster) crioMissing() []string {
	var missing []string
	for _, f := range []string{c.bin("crio"), c.bin("pinns"), c.bin(crioImportBinary), c.cfg.Conmon, c.cfg.Runc} {
		if !fileExists(f) {
			missing = append(missing, f)
		}
	}
	return missing
}

// startCRIO starts the node's CRI-O and imports the images.
func (c *Cluster) startCRIO(ctx context.Context, spec NodeSpec) error {
	if missing := c.crioMissing(); len(missing) > 0 {
		return fmt.Errorf("node %s runs CRI-O, but %s missing: `make crio` builds crio, pinns and gpudra-crio-import; conmon and runc are Debian packages (make prereqs-cluster)",
			spec.Name, strings.Join(missing, ", "))
	}
	n := c.Node(spec.Name)
	if err := os.MkdirAll(n.NoHugePagesDir(), 0o755); err != nil {
		return err
	}
	if _, err := run(ctx, c.nsenter(spec.Name, "mount", "--bind", n.NoHugePagesDir(), HugePagesDir)...); err != nil {
		return fmt.Errorf("node %s: hide the huge page sizes from CRI-O and the kubelet: %w", spec.Name, err)
	}
	if err := c.writeNodeRuntimeFiles(spec); err != nil {
		return err
	}
	if err := os.WriteFile(n.CRIOConfig(), []byte(c.crioConfig(n)), 0o644); err != nil {
		return err
	}
	if err := os.MkdirAll(n.CRIOConfigDir(), 0o755); err != nil {
		return err
	}
	name := c.runtimeName(spec.Name)
	pid, err := c.start(name, c.nsenter(spec.Name, c.bin("crio"), "--config", n.CRIOConfig(),
		"--config-dir", n.CRIOConfigDir()), nil)
	if err != nil {
		return err
	}
	if err := c.joinCgroup(spec.Name, "system", pid); err != nil {
		return err
	}
	sock := c.hostSocket(spec.Name)
	if err := c.waitFor(ctx, "CRI-O of "+spec.Name, []string{name}, func(context.Context) error {
		return dialUnix(sock)
	}); err != nil {
		return err
	}
	return c.importImages(ctx, spec.Name)
}
