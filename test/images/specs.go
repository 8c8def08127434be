package images

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Names of the local cluster's images. The gpudra image's name comes from
// the chart (GpudraImageName).
const (
	// PauseImage is the sandbox ("pause") image; containerd's
	// pinned_images.sandbox must name it.
	PauseImage = "registry.local/gpudra/pause:3.10"
	// WorkloadImage has busybox's tools, Debian's C library, ldconfig and
	// bash, and gpudra-gpus, for test pods.
	WorkloadImage = "registry.local/gpudra/workload:local"
	// AllGPUsWorkloadImage is the workload image with the variables CUDA's
	// base images set (WorkloadAllGPUsEnv): a runtime that acted on them
	// would give every container of it every GPU, claim or not.
	AllGPUsWorkloadImage = "registry.local/gpudra/workload-all-gpus:local"
)

// WorkloadAllGPUsEnv are the variables of AllGPUsWorkloadImage, as CUDA's
// base images (nvidia/cuda) set them.
var WorkloadAllGPUsEnv = []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"}

// Binaries in Sources.BinDir.
const (
	PauseBinary      = "gpudra-pause"
	GPUsBinary       = "gpudra-gpus"
	PluginBinary     = "gpu-kubelet-plugin"
	ControllerBinary = "gpu-controller"
)

// Sources are where the images' files come from.
type Sources struct {
	// BinDir holds the four binaries: gpudra-pause and gpudra-gpus built
	// static (CGO_ENABLED=0), gpu-kubelet-plugin and gpu-controller built
	// as the Dockerfile does (GpudraGoBuild).
	BinDir string
	// BusyboxRoot is Debian's busybox-static package unpacked (dpkg-deb -x):
	// it has bin/busybox.
	BusyboxRoot string
	// DebianRoot is the workload image's C library, loader, ldconfig and
	// bash: Debian packages unpacked into one root (make workload-root), with
	// its etc/ld.so.cache.
	DebianRoot string
	// HostRoot is the root the C library and CA certificates are taken
	// from, "/" normally.
	HostRoot string
	// ChartDir is the Helm chart, for the gpudra image's name.
	ChartDir string
}

// defaultPath is the PATH of every image.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// PauseSpec is the sandbox image: /pause, run as 65535 like Kubernetes' own.
func PauseSpec(s Sources) (Image, error) {
	bin := filepath.Join(s.BinDir, PauseBinary)
	if err := requireStatic(bin); err != nil {
		return Image{}, err
	}
	return Image{
		Name:    PauseImage,
		Config:  Config{Entrypoint: []string{"/pause"}, User: "65535:65535", Env: []string{defaultPath}},
		Entries: []Entry{HostFile("/pause", bin, 0o755)},
	}, nil
}

// BusyboxApplets are the commands the workload image links to busybox.
var BusyboxApplets = []string{
	"[", "[[", "ash", "awk", "basename", "cat", "chmod", "chown", "cp", "cut", "date", "dd", "df", "dirname",
	"du", "echo", "env", "expr", "false", "find", "grep", "head", "hostname", "id", "kill", "ln", "ls",
	"md5sum", "mkdir", "mktemp", "mount", "mv", "nproc", "printf", "ps", "pwd", "readlink",
	"realpath", "rm", "rmdir", "sed", "seq", "sh", "sha256sum", "sleep", "sort", "stat", "tail", "tee",
	"test", "timeout", "touch", "tr", "true", "uname", "uniq", "wc", "which", "whoami", "xargs", "yes",
}

// WorkloadSpec is the image of test pods: busybox's shell and tools in
// /bin, Debian's C library, loader, ldconfig and bash (Sources.DebianRoot)
// as a CUDA image has them, and gpudra-gpus in /usr/local/bin. The real
// nvidia-cdi-hook's update-ldcache indexes the driver libraries that CDI
// mounts into its /etc/ld.so.cache.
func WorkloadSpec(s Sources) (Image, error) {
	gpus := filepath.Join(s.BinDir, GPUsBinary)
	busybox := filepath.Join(s.BusyboxRoot, "bin", "busybox")
	for _, bin := range []string{gpus, busybox} {
		if err := requireStatic(bin); err != nil {
			return Image{}, err
		}
	}
	if err := checkApplets(busybox, BusyboxApplets); err != nil {
		return Image{}, err
	}
	for _, f := range []string{"bin/bash", "sbin/ldconfig", "etc/ld.so.cache"} {
		if _, err := os.Stat(filepath.Join(s.DebianRoot, f)); err != nil {
			return Image{}, fmt.Errorf("the workload image's Debian root %q lacks %s (make workload-root makes it): %w", s.DebianRoot, f, err)
		}
	}
	debian, err := TreeEntries(s.DebianRoot)
	if err != nil {
		return Image{}, err
	}
	entries := []Entry{
		HostFile("/bin/busybox", busybox, 0o755),
		HostFile("/usr/local/bin/"+GPUsBinary, gpus, 0o755),
		DataFile("/etc/passwd", []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"), 0o644),
		DataFile("/etc/group", []byte("root:x:0:\nnobody:x:65534:\n"), 0o644),
		Directory("/root", 0o700),
		Directory("/tmp", 0o1777),
	}
	for _, a := range BusyboxApplets {
		entries = append(entries, Link("/bin/"+a, "busybox"))
	}
	entries = append(entries, debian...)
	return Image{
		Name:    WorkloadImage,
		Config:  Config{Env: []string{defaultPath}, Cmd: WorkloadCmd, WorkingDir: "/"},
		Entries: entries,
	}, nil
}

// AllGPUsWorkloadSpec is the workload image with WorkloadAllGPUsEnv.
func AllGPUsWorkloadSpec(s Sources) (Image, error) {
	img, err := WorkloadSpec(s)
	if err != nil {
		return img, err
	}
	img.Name = AllGPUsWorkloadImage
	img.Config.Env = append(slices.Clone(img.Config.Env), WorkloadAllGPUsEnv...)
	return img, nil
}

// WorkloadCmd is the workload image's default command: print the GPUs the
// container sees (what the demo and the e2e tests read from its log), then
// stay up until the pod is deleted. PID 1 ignores a SIGTERM it has no
// handler for, hence the trap.
var WorkloadCmd = []string{"/bin/sh", "-c", "gpudra-gpus; trap 'exit 0' TERM; sleep 2147483647 & wait"}

// checkApplets fails unless busybox --list has every applet.
func checkApplets(busybox string, applets []string) error {
	out, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		return fmt.Errorf("list the applets of %s: %w", busybox, err)
	}
	have := map[string]bool{}
	for _, a := range strings.Fields(string(out)) {
		have[a] = true
	}
	var missing []string
	for _, a := range applets {
		if !have[a] {
			missing = append(missing, a)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s lacks the applets %s: use Debian's busybox-static package", busybox, strings.Join(missing, " "))
	}
	return nil
}

// GpudraGoBuild is how the Dockerfile builds the gpudra binaries.
var GpudraGoBuild = GoBuild{CGOEnabled: "1", Trimpath: true, LDFlags: "-s -w"}

// DlopenLibraries are C libraries the gpudra image carries although the
// binaries do not link them: the NVIDIA libraries the plugin loads with
// dlopen (libnvidia-ml.so.1 from the driver root) link these parts of glibc,
// which the distroless base image has too.
var DlopenLibraries = []string{"libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1"}

// Distroless-like account files: root, nobody and nonroot (65532).
const (
	gpudraPasswd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	gpudraGroup = "root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n"
	// CACertificates is the CA bundle's path, in the image and on a Debian host.
	CACertificates = "/etc/ssl/certs/ca-certificates.crt"
	// NonRoot is the user the gpudra image runs as.
	NonRoot = "65532:65532"
)

// GpudraBinaries are the image paths of the gpudra binaries (each taken
// from Sources.BinDir by its base name), as the Dockerfile copies them.
var GpudraBinaries = []string{"/usr/local/bin/" + PluginBinary, "/usr/local/bin/" + ControllerBinary}

// NVIDIA's nvidia-cdi-hook in the gpudra image: built by CDIHookBuildScript
// (static), taken from Sources.BinDir, at the path the plugin's
// --nvidia-cdi-hook-source defaults to (plugin.CDIHookImagePath).
const (
	CDIHookBinary      = "nvidia-cdi-hook"
	CDIHookBuildScript = "hack/build-cdi-hook.sh"
	GpudraCDIHook      = "/usr/local/bin/" + CDIHookBinary
)

// GpudraConfig is the gpudra image's config, as the Dockerfile's final
// stage sets it (USER, ENTRYPOINT) plus the distroless base's environment.
var GpudraConfig = Config{
	User:       NonRoot,
	Entrypoint: []string{"/usr/local/bin/" + ControllerBinary},
	Env:        []string{defaultPath, "SSL_CERT_FILE=" + CACertificates},
}

// GpudraSpec is the project's image, the content of the Dockerfile's final
// stage without Docker: both binaries in /usr/local/bin, and of the
// distroless base what they need: the host's loader and C libraries (the
// Dockerfile's base is the build image's Debian release, so the host's
// glibc is the one the binaries were linked against), account files with
// nonroot, the CA bundle, /tmp.
func GpudraSpec(s Sources) (Image, error) { return gpudraSpec(s, false) }

// gpudraSpec is GpudraSpec; failpoints accepts binaries built with the
// failpoints tag, which GpudraSpec refuses.
func gpudraSpec(s Sources, failpoints bool) (Image, error) {
	name, err := GpudraImageName(s.ChartDir)
	if err != nil {
		return Image{}, err
	}
	var bins []string
	var entries []Entry
	for _, b := range GpudraBinaries {
		bin := filepath.Join(s.BinDir, filepath.Base(b))
		if err := GpudraGoBuild.Check(bin); err != nil {
			return Image{}, err
		}
		if !failpoints {
			if err := refuseFailpoints(bin); err != nil {
				return Image{}, err
			}
		}
		bins = append(bins, bin)
		entries = append(entries, HostFile(b, bin, 0o755))
	}
	hook := filepath.Join(s.BinDir, CDIHookBinary)
	if err := requireStatic(hook); err != nil {
		return Image{}, fmt.Errorf("nvidia-cdi-hook runs on the host, whatever its C library: %w (%s builds it)", err, CDIHookBuildScript)
	}
	entries = append(entries, HostFile(GpudraCDIHook, hook, 0o755))
	rt, err := HostRuntime(s.HostRoot, bins, DlopenLibraries)
	if err != nil {
		return Image{}, fmt.Errorf("the gpudra image's C libraries: %w", err)
	}
	entries = append(append(entries,
		DataFile("/etc/passwd", []byte(gpudraPasswd), 0o644),
		DataFile("/etc/group", []byte(gpudraGroup), 0o644),
		DataFile("/etc/nsswitch.conf", []byte("passwd: files\ngroup: files\nhosts: files dns\n"), 0o644),
		HostFile(CACertificates, filepath.Join(s.HostRoot, CACertificates), 0o644),
		Entry{Path: "/home/nonroot", Type: Dir, Mode: 0o700, UID: 65532, GID: 65532},
		Directory("/root", 0o700),
		Directory("/tmp", 0o1777),
	), rt.Entries...)
	return Image{Name: name, Config: GpudraConfig, Entries: entries}, nil
}
