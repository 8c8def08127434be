// Package cdi writes the per-claim CDI specs that tell the container runtime
// which device nodes, environment and mounts a container gets for a prepared
// ResourceClaim. One transient spec file per claim; device names are
// "<claimUID>-<device>" so IDs are never reused across claims.
package cdi

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdiparser "tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/internal/plugin/model"
)

const (
	// Vendor and Class form the CDI kind of gpudra's claim specs (the
	// native driver's vendor; NewVendorWriter takes another one, see
	// compat.Names.CDIVendor).
	Vendor = "k8s.gpu.gpudra.io"
	Class  = "claim"
	// Kind is the CDI kind, "<vendor>/<class>".
	Kind = Vendor + "/" + Class

	// specExt is the format of the specs gpudra writes. NVIDIA's driver
	// writes the same names as YAML (leftoverExt): the compatibility mode
	// lists and removes those too, so that a migration leaves none behind.
	specExt     = ".json"
	leftoverExt = ".yaml"
)

// ClaimDevice is one allocated device of a claim, as the spec describes it.
type ClaimDevice struct {
	// DeviceName is the name in the ResourceSlice, e.g. "gpu-3".
	DeviceName string
	GPU        *model.GPU
	// RequestUUIDs are the GPUs allocated for the same request(s) of the
	// claim, in order: the device ordinals of the MPS memory limits. No
	// environment variable lists them: NVIDIA_VISIBLE_DEVICES is not set (a
	// node whose default runtime is nvidia-container-runtime in legacy
	// mode would inject the GPUs a second time, and with devices of two
	// claims in one container the last variable wins).
	RequestUUIDs []string
	// Env holds extra "KEY=value" entries (from the claim's config).
	Env []string
	// MIG is set for a MIG device of GPU.
	MIG *MIGInstance
	// Mounts are extra mounts (e.g. the MPS pipe directory).
	Mounts []*cdispec.Mount
	// VFIO, when set, makes the device a passed-through GPU (bound to
	// vfio-pci): its edits are these device nodes only (internal/plugin/vfio
	// DeviceNodes), without the driver's nodes, libraries or environment,
	// and GPU may be nil.
	VFIO []*cdispec.DeviceNode
}

// identityEnv names a device to the container, so that it can list its
// GPUs like nvidia-smi -L without NVML: GPUDRA_GPU_<minor>=<uuid> for a
// whole GPU, GPUDRA_MIG_<minor>_<gi>_<ci>=<uuid> and ..._PROFILE=<profile>
// for a MIG device with GPUDRA_MIG_<minor>_PARENT=<the GPU's uuid>, and the
// GPU's product name in GPUDRA_GPU_<minor>_PRODUCT. Each variable is unique
// per device or equal in every device that sets it (two MIG devices of one
// GPU), so the devices of several claims in one container never clash.
// The values come from NVML and are made printable (printable).
func identityEnv(d ClaimDevice) []string {
	minor := strconv.Itoa(d.GPU.Minor)
	var env []string
	if d.MIG == nil {
		env = append(env, "GPUDRA_GPU_"+minor+"="+printable(d.GPU.UUID))
	} else {
		mig := fmt.Sprintf("GPUDRA_MIG_%s_%d_%d", minor, d.MIG.GIID, d.MIG.CIID)
		env = append(env, mig+"="+printable(d.MIG.UUID))
		if d.MIG.Profile != "" {
			env = append(env, mig+"_PROFILE="+printable(d.MIG.Profile))
		}
		env = append(env, "GPUDRA_MIG_"+minor+"_PARENT="+printable(d.GPU.UUID))
	}
	if d.GPU.ProductName != "" {
		env = append(env, "GPUDRA_GPU_"+minor+"_PRODUCT="+printable(d.GPU.ProductName))
	}
	return env
}

// printable replaces the characters of s that checkEnv refuses with '?'.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unsafeInSpec(r) {
			return '?'
		}
		return r
	}, s)
}

// unsafeInSpec reports characters that the container runtimes' CDI loader
// cannot read back from a spec: it parses the JSON spec as YAML, which
// refuses control characters that encoding/json writes unescaped (DEL, the
// C1 controls) and the non-characters U+FFFE and U+FFFF. Other controls are
// refused too: no environment value of the plugin's has a reason for them.
func unsafeInSpec(r rune) bool {
	return unicode.IsControl(r) || r == 0xFFFE || r == 0xFFFF || r == utf8.RuneError
}

// checkEnv fails for an environment entry the runtime could not load.
func checkEnv(device string, env []string) error {
	for _, e := range env {
		if strings.ContainsFunc(e, unsafeInSpec) {
			return fmt.Errorf("environment entry %q of device %s has a control character or invalid UTF-8, "+
				"which the container runtime's CDI loader cannot read", e, device)
		}
	}
	return nil
}

// Writer writes and removes the per-claim specs in one CDI directory.
type Writer struct {
	dir     string
	vendor  string
	cache   *cdiapi.Cache
	edits   EditsProvider
	migCaps MIGCaps
}

// NewWriter uses dir (e.g. /var/run/cdi) for the specs of vendor Vendor.
func NewWriter(dir string, edits EditsProvider) (*Writer, error) {
	return NewVendorWriter(dir, Vendor, edits)
}

// NewVendorWriter uses dir for the specs of the given CDI vendor (e.g.
// k8s.gpu.nvidia.com): their kind, file names and device IDs name it, and
// ListClaims sees only its specs.
func NewVendorWriter(dir, vendor string, edits EditsProvider) (*Writer, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create CDI spec directory %s: %w", dir, err)
	}
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("open CDI spec directory %s: %w", dir, err)
	}
	return &Writer{dir: dir, vendor: vendor, cache: cache, edits: edits}, nil
}

// Dir is the CDI spec directory.
func (w *Writer) Dir() string { return w.dir }

// DeviceID is the fully qualified CDI device ID of a claim's device under
// Vendor.
func DeviceID(claimUID, deviceName string) string { return deviceID(Vendor, claimUID, deviceName) }

// SpecName is the file name (without extension) of a claim's spec under
// Vendor.
func SpecName(claimUID string) string { return specName(Vendor, claimUID) }

func deviceID(vendor, claimUID, deviceName string) string {
	return cdiparser.QualifiedName(vendor, Class, claimUID+"-"+deviceName)
}

func specName(vendor, claimUID string) string {
	return cdiapi.GenerateTransientSpecName(vendor, Class, claimUID)
}

// SpecPath is where a claim's spec lives.
func (w *Writer) SpecPath(claimUID string) string {
	return filepath.Join(w.dir, specName(w.vendor, claimUID)+specExt)
}

// Spec builds (without writing) the spec of a claim.
func (w *Writer) Spec(claimUID string, devices []ClaimDevice) (*cdispec.Spec, error) {
	if err := model.ValidateUID(claimUID); err != nil {
		return nil, err
	}
	spec := &cdispec.Spec{Kind: w.vendor + "/" + Class}
	// A claim of passed-through GPUs only gets none of the driver's edits.
	if slices.ContainsFunc(devices, func(d ClaimDevice) bool { return d.VFIO == nil }) {
		common, err := w.edits.Common()
		if err != nil {
			return nil, err
		}
		spec.ContainerEdits = *common
	}
	for _, d := range devices {
		if err := cdiparser.ValidateDeviceName(claimUID + "-" + d.DeviceName); err != nil {
			return nil, fmt.Errorf("CDI spec of claim %s: device name %q: %w", claimUID, d.DeviceName, err)
		}
		if d.VFIO != nil {
			spec.Devices = append(spec.Devices, cdispec.Device{
				Name:           claimUID + "-" + d.DeviceName,
				ContainerEdits: cdispec.ContainerEdits{DeviceNodes: d.VFIO},
			})
			continue
		}
		edits, err := w.edits.Device(d.GPU)
		if err != nil {
			return nil, err
		}
		e := *edits
		own := identityEnv(d)
		if d.MIG != nil {
			if e, err = w.migEdits(d, edits); err != nil {
				return nil, err
			}
		}
		e.Env = append(append(own, edits.Env...), d.Env...)
		if err := checkEnv(d.DeviceName, e.Env); err != nil {
			return nil, fmt.Errorf("CDI spec of claim %s: %w", claimUID, err)
		}
		e.Mounts = append(append([]*cdispec.Mount{}, edits.Mounts...), d.Mounts...)
		if len(e.Mounts) == 0 {
			e.Mounts = nil
		}
		spec.Devices = append(spec.Devices, cdispec.Device{
			Name:           claimUID + "-" + d.DeviceName,
			ContainerEdits: e,
		})
	}
	version, err := cdispec.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, fmt.Errorf("determine CDI version of claim %s spec: %w", claimUID, err)
	}
	spec.Version = version
	return spec, nil
}

// WriteClaim writes (or atomically replaces) the spec of a claim and returns
// the CDI device ID of each device, keyed by device name.
func (w *Writer) WriteClaim(claimUID string, devices []ClaimDevice) (map[string]string, error) {
	spec, err := w.Spec(claimUID, devices)
	if err != nil {
		return nil, err
	}
	// A spec of the same claim from NVIDIA's driver would define the same
	// device names a second time.
	if err := w.cache.RemoveSpec(specName(w.vendor, claimUID) + leftoverExt); err != nil {
		return nil, fmt.Errorf("remove the YAML CDI spec another driver left for claim %s in %s: %w", claimUID, w.dir, err)
	}
	if err := w.cache.WriteSpec(spec, specName(w.vendor, claimUID)+specExt); err != nil {
		return nil, fmt.Errorf("write CDI spec for claim %s to %s: %w", claimUID, w.dir, err)
	}
	ids := make(map[string]string, len(devices))
	for _, d := range devices {
		ids[d.DeviceName] = deviceID(w.vendor, claimUID, d.DeviceName)
	}
	return ids, nil
}

// RemoveClaim deletes a claim's spec, and a YAML one of the same name
// another driver left; a missing spec is not an error.
func (w *Writer) RemoveClaim(claimUID string) error {
	if err := model.ValidateUID(claimUID); err != nil {
		return err
	}
	for _, ext := range []string{specExt, leftoverExt} {
		if err := w.cache.RemoveSpec(specName(w.vendor, claimUID) + ext); err != nil {
			return fmt.Errorf("remove CDI spec of claim %s: %w", claimUID, err)
		}
	}
	return nil
}

// HasClaim reports whether a claim's spec exists.
func (w *Writer) HasClaim(claimUID string) (bool, error) {
	_, err := os.Stat(w.SpecPath(claimUID))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	default:
		return false, fmt.Errorf("check CDI spec of claim %s: %w", claimUID, err)
	}
}

// ListClaims returns the UIDs of all claims that have a spec of our name in
// the directory (JSON, or YAML as NVIDIA's driver writes them), sorted, each
// once. Used at start-up to find specs left behind by a crash or by the
// driver gpudra replaced.
func (w *Writer) ListClaims() ([]string, error) {
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		return nil, fmt.Errorf("list CDI spec directory %s: %w", w.dir, err)
	}
	prefix := specName(w.vendor, "")
	var uids []string
	for _, e := range entries {
		name := e.Name()
		ext := filepath.Ext(name)
		if e.IsDir() || !strings.HasPrefix(name, prefix) || ext != specExt && ext != leftoverExt {
			continue
		}
		uid := strings.TrimSuffix(strings.TrimPrefix(name, prefix), ext)
		if model.ValidateUID(uid) == nil {
			uids = append(uids, uid)
		}
	}
	sort.Strings(uids)
	return slices.Compact(uids), nil
}
