package compat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/api/v1alpha1"
)

// The opaque configuration API of NVIDIA's DRA driver that the NVIDIA mode
// reads. The types below describe its JSON schema (field names and types);
// decoding is strict: unknown, misspelt or duplicate fields are errors.
const (
	NVIDIAAPIVersion     = "resource.nvidia.com/v1beta1"
	GpuConfigKind        = "GpuConfig"
	MigDeviceConfigKind  = "MigDeviceConfig"
	nvidiaTimeSlicing    = "TimeSlicing"
	nvidiaMPS            = "MPS"
	maxPinnedDeviceIndex = v1alpha1.MaxMPSDeviceOrdinal
)

// unsupportedKinds are kinds of NVIDIA's API that gpudra does not implement,
// with what to do instead.
var unsupportedKinds = map[string]string{
	"ComputeDomainChannelConfig": "gpudra does not serve the IMEX channels of ComputeDomains yet (it has the ComputeDomain API only; " +
		"see docs/computedomains.md)",
	"ComputeDomainDaemonConfig": "gpudra does not run the IMEX daemons of ComputeDomains yet (it has the ComputeDomain API only; " +
		"see docs/computedomains.md)",
}

type nvTypeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

type nvGpuConfig struct {
	nvTypeMeta `json:",inline"`
	Sharing    *nvGpuSharing `json:"sharing,omitempty"`
}

type nvMigDeviceConfig struct {
	nvTypeMeta `json:",inline"`
	Sharing    *nvMigSharing `json:"sharing,omitempty"`
}

type nvGpuSharing struct {
	Strategy          string         `json:"strategy"`
	TimeSlicingConfig *nvTimeSlicing `json:"timeSlicingConfig,omitempty"`
	MpsConfig         *nvMps         `json:"mpsConfig,omitempty"`
}

type nvMigSharing struct {
	Strategy  string `json:"strategy"`
	MpsConfig *nvMps `json:"mpsConfig,omitempty"`
}

type nvTimeSlicing struct {
	Interval *string `json:"interval,omitempty"`
}

type nvMps struct {
	DefaultActiveThreadPercentage     *int                         `json:"defaultActiveThreadPercentage,omitempty"`
	DefaultPinnedDeviceMemoryLimit    *resource.Quantity           `json:"defaultPinnedDeviceMemoryLimit,omitempty"`
	DefaultPerDevicePinnedMemoryLimit map[string]resource.Quantity `json:"defaultPerDevicePinnedMemoryLimit,omitempty"`
	MultiUser                         *bool                        `json:"multiUser,omitempty"`
}

// DeviceKind restricts which allocated devices a configuration applies to.
type DeviceKind string

const (
	// AnyDevice: gpudra's GpuClaimParameters apply to GPUs and MIG devices.
	AnyDevice DeviceKind = ""
	// WholeGPU: NVIDIA's GpuConfig applies to whole GPUs only.
	WholeGPU DeviceKind = "gpu"
	// MIGDevice: NVIDIA's MigDeviceConfig applies to MIG devices only.
	MIGDevice DeviceKind = "mig"
)

// Config is one decoded opaque configuration.
type Config struct {
	// Kind is the configuration's kind, e.g. GpuConfig.
	Kind string
	// For names the devices the configuration may apply to. NVIDIA's rule:
	// a configuration without requests skips devices of the other kind; one
	// that names a request fails on a device of the other kind.
	For DeviceKind
	// Params are the equivalent, defaulted and valid GpuClaimParameters.
	Params *v1alpha1.GpuClaimParameters
	// VFIO is a VfioDeviceConfig's request (For is VFIODevice); nil for
	// every other kind.
	VFIO *VFIOConfig
}

// ConfigError is the error for an NVIDIA-format configuration that cannot be
// used; gpudra's own GpuClaimParameters fail with *v1alpha1.DecodeError.
type ConfigError struct {
	// Kind is the configuration's kind when it could be read.
	Kind string
	Errs field.ErrorList
	Err  error
}

func (e *ConfigError) Error() string {
	what := "opaque configuration"
	if e.Kind != "" {
		what = NVIDIAAPIVersion + " " + e.Kind
	}
	if e.Err != nil {
		return "invalid " + what + ": " + e.Err.Error()
	}
	return "invalid " + what + ": " + e.Errs.ToAggregate().Error()
}

func (e *ConfigError) Unwrap() error {
	if e.Err != nil {
		return e.Err
	}
	return e.Errs.ToAggregate()
}

// Decode reads one opaque configuration for the driver. Natively that is
// gpudra's GpuClaimParameters (v1alpha1.Decode, unchanged). In the NVIDIA
// mode it is NVIDIA's GpuConfig or MigDeviceConfig, or gpudra's
// GpuClaimParameters.
func (n Names) Decode(raw []byte) (*Config, error) {
	if n.Mode != NVIDIA {
		p, err := v1alpha1.Decode(raw)
		if err != nil {
			return nil, err
		}
		return &Config{Kind: v1alpha1.Kind, Params: p}, nil
	}
	if len(raw) > v1alpha1.MaxParametersSize {
		return nil, &ConfigError{Err: fmt.Errorf("parameters are %d bytes, more than the %d bytes allowed", len(raw), v1alpha1.MaxParametersSize)}
	}
	data := bytes.TrimSpace(raw)
	if len(data) == 0 || data[0] != '{' || !json.Valid(data) {
		converted, err := yaml.YAMLToJSONStrict(raw)
		if err != nil {
			return nil, &ConfigError{Err: fmt.Errorf("cannot parse parameters as JSON or YAML: %w", err)}
		}
		data = bytes.TrimSpace(converted)
	}
	var tm nvTypeMeta
	if len(data) == 0 || data[0] != '{' || json.Unmarshal(data, &tm) != nil {
		return nil, &ConfigError{Err: fmt.Errorf("parameters must be an object with apiVersion %q and kind %q or %q",
			NVIDIAAPIVersion, GpuConfigKind, MigDeviceConfigKind)}
	}
	switch {
	case tm.APIVersion == v1alpha1.APIVersion:
		p, err := v1alpha1.Decode(raw)
		if err != nil {
			return nil, err
		}
		return &Config{Kind: v1alpha1.Kind, Params: p}, nil
	case tm.APIVersion != NVIDIAAPIVersion:
		return nil, &ConfigError{Errs: field.ErrorList{field.NotSupported(field.NewPath("apiVersion"), tm.APIVersion,
			[]string{NVIDIAAPIVersion, v1alpha1.APIVersion})}}
	}
	switch tm.Kind {
	case GpuConfigKind:
		var c nvGpuConfig
		if err := strict(data, &c); err != nil {
			return nil, &ConfigError{Kind: tm.Kind, Err: err}
		}
		p, errs := c.Sharing.convert(field.NewPath("sharing"))
		if len(errs) > 0 {
			return nil, &ConfigError{Kind: tm.Kind, Errs: errs}
		}
		return &Config{Kind: tm.Kind, For: WholeGPU, Params: p}, nil
	case MigDeviceConfigKind:
		var c nvMigDeviceConfig
		if err := strict(data, &c); err != nil {
			return nil, &ConfigError{Kind: tm.Kind, Err: err}
		}
		var s *nvGpuSharing
		if c.Sharing != nil {
			s = &nvGpuSharing{Strategy: c.Sharing.Strategy, MpsConfig: c.Sharing.MpsConfig}
		}
		p, errs := s.convert(field.NewPath("sharing"))
		if len(errs) > 0 {
			return nil, &ConfigError{Kind: tm.Kind, Errs: errs}
		}
		return &Config{Kind: tm.Kind, For: MIGDevice, Params: p}, nil
	case VfioDeviceConfigKind:
		return n.decodeVfio(data)
	}
	if why, ok := unsupportedKinds[tm.Kind]; ok {
		return nil, &ConfigError{Kind: tm.Kind, Err: fmt.Errorf("kind %s is not supported: %s", tm.Kind, why)}
	}
	return nil, &ConfigError{Errs: field.ErrorList{field.NotSupported(field.NewPath("kind"), tm.Kind,
		[]string{GpuConfigKind, MigDeviceConfigKind})}}
}

// strict decodes case-sensitively and rejects unknown and duplicate fields.
func strict(data []byte, into any) error {
	strictErrs, err := sigsjson.UnmarshalStrict(data, into)
	if err != nil {
		return err
	}
	if len(strictErrs) > 0 {
		msgs := make([]string, len(strictErrs))
		for i, e := range strictErrs {
			msgs[i] = e.Error()
		}
		return fmt.Errorf("%s (field names are case-sensitive; see NVIDIA's %s API)", strings.Join(msgs, "; "), NVIDIAAPIVersion)
	}
	return nil
}

// convert maps NVIDIA's sharing settings onto GpuClaimParameters: no sharing
// is exclusive use (NVIDIA's default with its TimeSlicingSettings gate off),
// TimeSlicing without an interval is the Default interval, MPS without
// settings uses MPS's defaults.
func (s *nvGpuSharing) convert(path *field.Path) (*v1alpha1.GpuClaimParameters, field.ErrorList) {
	p := &v1alpha1.GpuClaimParameters{}
	if s != nil {
		var errs field.ErrorList
		p.Sharing, errs = s.sharing(path)
		if len(errs) > 0 {
			return nil, errs
		}
	}
	v1alpha1.SetDefaults(p)
	p.APIVersion, p.Kind = v1alpha1.APIVersion, v1alpha1.Kind
	if errs := v1alpha1.Validate(p); len(errs) > 0 {
		// The checks above cover every field; this is a safety net.
		return nil, errs
	}
	return p, nil
}

func (s *nvGpuSharing) sharing(path *field.Path) (*v1alpha1.GpuSharing, field.ErrorList) {
	var errs field.ErrorList
	out := &v1alpha1.GpuSharing{}
	switch s.Strategy {
	case nvidiaTimeSlicing:
		out.Strategy = v1alpha1.TimeSlicingStrategy
		out.TimeSlicing = &v1alpha1.TimeSlicingConfig{Interval: v1alpha1.DefaultTimeSlice}
		if s.MpsConfig != nil {
			errs = append(errs, field.Forbidden(path.Child("mpsConfig"), "may only be set with strategy MPS"))
		}
		if s.TimeSlicingConfig != nil && s.TimeSlicingConfig.Interval != nil {
			iv := v1alpha1.TimeSliceInterval(*s.TimeSlicingConfig.Interval)
			if iv.Int() < 0 {
				errs = append(errs, field.NotSupported(path.Child("timeSlicingConfig", "interval"), *s.TimeSlicingConfig.Interval,
					v1alpha1.SupportedIntervals))
			}
			out.TimeSlicing.Interval = iv
		}
	case nvidiaMPS:
		out.Strategy = v1alpha1.MPSStrategy
		if s.TimeSlicingConfig != nil {
			errs = append(errs, field.Forbidden(path.Child("timeSlicingConfig"), "may only be set with strategy TimeSlicing"))
		}
		var mpsErrs field.ErrorList
		out.MPS, mpsErrs = s.MpsConfig.convert(path.Child("mpsConfig"))
		errs = append(errs, mpsErrs...)
	case "":
		errs = append(errs, field.Required(path.Child("strategy"), fmt.Sprintf("supported values: %q, %q", nvidiaTimeSlicing, nvidiaMPS)))
	default:
		errs = append(errs, field.NotSupported(path.Child("strategy"), s.Strategy, []string{nvidiaTimeSlicing, nvidiaMPS}))
	}
	return out, errs
}

// convert reads NVIDIA's MPS settings as NVIDIA validates them (its
// MpsConfig.Validate and MpsPerDevicePinnedMemoryLimit.Normalize), but at
// admission instead of at prepare where a key can be checked without the
// allocation.
func (m *nvMps) convert(path *field.Path) (*v1alpha1.MpsConfig, field.ErrorList) {
	out := &v1alpha1.MpsConfig{}
	if m == nil {
		return out, nil
	}
	var errs field.ErrorList
	if p := m.DefaultActiveThreadPercentage; p != nil {
		switch {
		case *p < 0 || *p > 100:
			errs = append(errs, field.Invalid(path.Child("defaultActiveThreadPercentage"), *p, "must be between 0 and 100"))
		case *p > 0:
			v := int32(*p)
			out.DefaultActiveThreadPercentage = &v
		}
		// 0 passes NVIDIA's validation; its daemon then sends the value to
		// nvidia-cuda-mps-control, which refuses it and keeps its default
		// (all threads). gpudra leaves the default directly.
	}
	if u := m.MultiUser; u != nil && *u {
		errs = append(errs, field.Invalid(path.Child("multiUser"), true,
			"gpudra's MPS control daemon serves one user at a time (a client of another user waits until the first user's "+
				"clients are done); run the claim's containers with the same user ID and remove multiUser, or set it to false"))
	}
	if q := m.DefaultPinnedDeviceMemoryLimit; q != nil {
		errs = append(errs, v1alpha1.ValidatePinnedMemoryLimit(*q, path.Child("defaultPinnedDeviceMemoryLimit"))...)
		c := q.DeepCopy()
		out.DefaultPinnedDeviceMemoryLimit = &c
	}
	limits, limitErrs := perDeviceLimits(m.DefaultPerDevicePinnedMemoryLimit, path.Child("defaultPerDevicePinnedMemoryLimit"))
	out.PerDevicePinnedMemoryLimits = limits
	return out, append(errs, limitErrs...)
}

// perDeviceLimits converts NVIDIA's per-device limits: a key is a device's
// UUID, else an integer (as strconv.Atoi reads it, so "01" and "+1" are 1)
// indexing the devices the daemon serves.
func perDeviceLimits(in map[string]resource.Quantity, path *field.Path) (map[string]resource.Quantity, field.ErrorList) {
	var errs field.ErrorList
	var out map[string]resource.Quantity
	from := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(in)) {
		q := in[k]
		key := k
		if _, uuid, err := v1alpha1.ParseDeviceKey(k); err != nil || uuid == "" {
			n, err := strconv.Atoi(k)
			if err != nil || n < 0 || n > maxPinnedDeviceIndex {
				errs = append(errs, field.Invalid(path.Key(k), k,
					fmt.Sprintf("must be the UUID of one of the claim's devices (GPU-… or MIG-…) or a device index, 0 to %d", maxPinnedDeviceIndex)))
				continue
			}
			key = strconv.Itoa(n)
		}
		if limitErrs := v1alpha1.ValidatePinnedMemoryLimit(q, path.Key(k)); len(limitErrs) > 0 {
			errs = append(errs, limitErrs...)
			continue
		}
		if prev, ok := from[key]; ok {
			errs = append(errs, field.Duplicate(path.Key(k), fmt.Sprintf("%q and %q both name device index %s; keep one", prev, k, key)))
			continue
		}
		from[key] = k
		if out == nil {
			out = map[string]resource.Quantity{}
		}
		out[key] = q.DeepCopy()
	}
	return out, errs
}
