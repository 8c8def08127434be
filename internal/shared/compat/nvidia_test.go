package compat

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/api/v1alpha1"
)

func params(s *v1alpha1.GpuSharing) *v1alpha1.GpuClaimParameters {
	p := &v1alpha1.GpuClaimParameters{Sharing: s}
	v1alpha1.SetDefaults(p)
	p.APIVersion, p.Kind = v1alpha1.APIVersion, v1alpha1.Kind
	return p
}

func TestDecodeNVIDIA(t *testing.T) {
	nv := MustResolve(Flags{Compatibility: "nvidia"})
	q := resource.MustParse
	tests := []struct {
		name    string
		raw     string
		kind    string
		forKind DeviceKind
		want    *v1alpha1.GpuClaimParameters
		errHas  []string
	}{
		{name: "GpuConfig without sharing is exclusive use",
			raw: `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig"}`, kind: GpuConfigKind, forKind: WholeGPU,
			want: params(nil)},
		{name: "time slicing without settings is the Default interval",
			raw:  `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing"}}`,
			kind: GpuConfigKind, forKind: WholeGPU,
			want: params(&v1alpha1.GpuSharing{Strategy: v1alpha1.TimeSlicingStrategy})},
		{name: "time slicing interval",
			raw: `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig",
			       "sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Long"}}}`,
			kind: GpuConfigKind, forKind: WholeGPU,
			want: params(&v1alpha1.GpuSharing{Strategy: v1alpha1.TimeSlicingStrategy,
				TimeSlicing: &v1alpha1.TimeSlicingConfig{Interval: v1alpha1.LongTimeSlice}})},
		{name: "YAML as in a manifest",
			raw: "apiVersion: resource.nvidia.com/v1beta1\nkind: GpuConfig\nsharing:\n  strategy: TimeSlicing\n" +
				"  timeSlicingConfig:\n    interval: Short\n",
			kind: GpuConfigKind, forKind: WholeGPU,
			want: params(&v1alpha1.GpuSharing{Strategy: v1alpha1.TimeSlicingStrategy,
				TimeSlicing: &v1alpha1.TimeSlicingConfig{Interval: v1alpha1.ShortTimeSlice}})},
		{name: "MPS with every setting",
			raw: `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{
			       "defaultActiveThreadPercentage":50,"defaultPinnedDeviceMemoryLimit":"10Gi",
			       "defaultPerDevicePinnedMemoryLimit":{"0":"5Gi","1":"2Gi"}}}}`,
			kind: GpuConfigKind, forKind: WholeGPU,
			want: params(&v1alpha1.GpuSharing{Strategy: v1alpha1.MPSStrategy, MPS: &v1alpha1.MpsConfig{
				DefaultActiveThreadPercentage:  ptr.To[int32](50),
				DefaultPinnedDeviceMemoryLimit: ptr.To(q("10Gi")),
				PerDevicePinnedMemoryLimits:    map[string]resource.Quantity{"0": q("5Gi"), "1": q("2Gi")}}})},
		{name: "MPS without settings",
			raw:  `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS"}}`,
			kind: GpuConfigKind, forKind: WholeGPU,
			want: params(&v1alpha1.GpuSharing{Strategy: v1alpha1.MPSStrategy, MPS: &v1alpha1.MpsConfig{}})},
		{name: "MigDeviceConfig time slicing",
			raw:  `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"MigDeviceConfig","sharing":{"strategy":"TimeSlicing"}}`,
			kind: MigDeviceConfigKind, forKind: MIGDevice,
			want: params(&v1alpha1.GpuSharing{Strategy: v1alpha1.TimeSlicingStrategy})},
		{name: "MigDeviceConfig MPS",
			raw: `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"MigDeviceConfig",
			       "sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":25}}}`,
			kind: MigDeviceConfigKind, forKind: MIGDevice,
			want: params(&v1alpha1.GpuSharing{Strategy: v1alpha1.MPSStrategy,
				MPS: &v1alpha1.MpsConfig{DefaultActiveThreadPercentage: ptr.To[int32](25)}})},
		{name: "per-device limits by UUID and by index, as NVIDIA's Normalize reads them",
			raw: `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{
			       "defaultPerDevicePinnedMemoryLimit":{"GPU-2f8d0a45-0e43-4b3a-9f52-1d3e5c7a9b10":"1Gi","+1":"2Gi","02":"3Gi"}}}}`,
			kind: GpuConfigKind, forKind: WholeGPU,
			want: params(&v1alpha1.GpuSharing{Strategy: v1alpha1.MPSStrategy, MPS: &v1alpha1.MpsConfig{
				PerDevicePinnedMemoryLimits: map[string]resource.Quantity{
					"GPU-2f8d0a45-0e43-4b3a-9f52-1d3e5c7a9b10": q("1Gi"), "1": q("2Gi"), "2": q("3Gi")}}})},
		{name: "MigDeviceConfig per-device limit by MIG UUID",
			raw: `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"MigDeviceConfig","sharing":{"strategy":"MPS","mpsConfig":{
			       "defaultPerDevicePinnedMemoryLimit":{"MIG-5c1e7f3a-9d2b-4e6f-8a0c-3b7d9e1f2a4c":"1Gi"}}}}`,
			kind: MigDeviceConfigKind, forKind: MIGDevice,
			want: params(&v1alpha1.GpuSharing{Strategy: v1alpha1.MPSStrategy, MPS: &v1alpha1.MpsConfig{
				PerDevicePinnedMemoryLimits: map[string]resource.Quantity{"MIG-5c1e7f3a-9d2b-4e6f-8a0c-3b7d9e1f2a4c": q("1Gi")}}})},
		{name: "thread percentage 0 is accepted and leaves MPS's default",
			raw:  `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":0}}}`,
			kind: GpuConfigKind, forKind: WholeGPU,
			want: params(&v1alpha1.GpuSharing{Strategy: v1alpha1.MPSStrategy, MPS: &v1alpha1.MpsConfig{}})},
		{name: "multiUser false is accepted",
			raw:  `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"multiUser":false}}}`,
			kind: GpuConfigKind, forKind: WholeGPU,
			want: params(&v1alpha1.GpuSharing{Strategy: v1alpha1.MPSStrategy, MPS: &v1alpha1.MpsConfig{}})},
		{name: "gpudra's own parameters are accepted too",
			raw:  `{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"GpuClaimParameters","sharing":{"strategy":"Exclusive"}}`,
			kind: v1alpha1.Kind, forKind: AnyDevice, want: params(nil)},

		{name: "unknown field", raw: `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsconfig":{}}}`,
			errHas: []string{"GpuConfig", `unknown field "sharing.mpsconfig"`}},
		{name: "timeSlicingConfig does not exist for MIG devices",
			raw:    `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"MigDeviceConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{}}}`,
			errHas: []string{"MigDeviceConfig", `unknown field "sharing.timeSlicingConfig"`}},
		{name: "duplicate field", raw: `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","strategy":"MPS"}}`,
			errHas: []string{"duplicate field"}},
		{name: "VfioDeviceConfig is named as unsupported", raw: `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"VfioDeviceConfig"}`,
			errHas: []string{"VfioDeviceConfig", "not supported", "VFIO"}},
		{name: "ComputeDomainChannelConfig is named as unsupported",
			raw:    `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainChannelConfig","domainID":"x"}`,
			errHas: []string{"ComputeDomainChannelConfig", "not supported"}},
		{name: "unknown kind", raw: `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"TpuConfig"}`,
			errHas: []string{"kind", `"TpuConfig"`, "GpuConfig", "MigDeviceConfig"}},
		{name: "wrong apiVersion", raw: `{"apiVersion":"resource.nvidia.com/v1alpha1","kind":"GpuConfig"}`,
			errHas: []string{"apiVersion", "resource.nvidia.com/v1alpha1", "resource.nvidia.com/v1beta1"}},
		{name: "missing apiVersion", raw: `{"kind":"GpuConfig"}`, errHas: []string{"apiVersion"}},
		{name: "unknown strategy", raw: `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"Exclusive"}}`,
			errHas: []string{"sharing.strategy", `"Exclusive"`, "TimeSlicing", "MPS"}},
		{name: "missing strategy", raw: `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{}}`,
			errHas: []string{"sharing.strategy", "Required"}},
		{name: "unknown interval",
			raw:    `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"1ms"}}}`,
			errHas: []string{"sharing.timeSlicingConfig.interval", `"1ms"`, "Medium"}},
		{name: "MPS settings with time slicing",
			raw:    `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","mpsConfig":{}}}`,
			errHas: []string{"sharing.mpsConfig", "strategy MPS"}},
		{name: "time-slicing settings with MPS",
			raw:    `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","timeSlicingConfig":{}}}`,
			errHas: []string{"sharing.timeSlicingConfig", "strategy TimeSlicing"}},
		{name: "thread percentage above 100",
			raw:    `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":101}}}`,
			errHas: []string{"sharing.mpsConfig.defaultActiveThreadPercentage", "between 0 and 100"}},
		{name: "negative thread percentage",
			raw:    `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":-1}}}`,
			errHas: []string{"sharing.mpsConfig.defaultActiveThreadPercentage", "between 0 and 100"}},
		{name: "multiUser true is refused with what to do",
			raw:    `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"multiUser":true}}}`,
			errHas: []string{"sharing.mpsConfig.multiUser", "same user ID", "remove multiUser"}},
		{name: "pinned limit below 1Mi",
			raw:    `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultPinnedDeviceMemoryLimit":"1Ki"}}}`,
			errHas: []string{"sharing.mpsConfig.defaultPinnedDeviceMemoryLimit", "1Mi"}},
		{name: "pinned limit that overflows int64",
			raw:    `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultPinnedDeviceMemoryLimit":"9223372036854775808"}}}`,
			errHas: []string{"sharing.mpsConfig.defaultPinnedDeviceMemoryLimit", "at most 1Pi"}},
		{name: "per-device limit that overflows int64",
			raw: `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{
			       "defaultPerDevicePinnedMemoryLimit":{"0":"18446744073709551616"}}}}`,
			errHas: []string{"defaultPerDevicePinnedMemoryLimit[0]", "at most 1Pi"}},
		{name: "per-device key neither an index nor a UUID",
			raw: `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{
			       "defaultPerDevicePinnedMemoryLimit":{"first":"1Gi"}}}}`,
			errHas: []string{"defaultPerDevicePinnedMemoryLimit[first]", "index", "UUID"}},
		{name: "negative per-device index",
			raw: `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{
			       "defaultPerDevicePinnedMemoryLimit":{"-1":"1Gi"}}}}`,
			errHas: []string{"defaultPerDevicePinnedMemoryLimit[-1]", "index"}},
		{name: "two keys for the same index",
			raw: `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{
			       "defaultPerDevicePinnedMemoryLimit":{"1":"1Gi","01":"2Gi"}}}}`,
			errHas: []string{"defaultPerDevicePinnedMemoryLimit", "index 1", "keep one"}},
		{name: "per-device limit below 1Mi",
			raw: `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{
			       "defaultPerDevicePinnedMemoryLimit":{"0":"1Ki"}}}}`,
			errHas: []string{"defaultPerDevicePinnedMemoryLimit[0]", "1Mi"}},
		{name: "not an object", raw: `[1]`, errHas: []string{"must be an object"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := nv.Decode([]byte(tc.raw))
			if tc.errHas != nil {
				if err == nil {
					t.Fatalf("Decode succeeded (%+v), want an error", got)
				}
				for _, s := range tc.errHas {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %q", err, s)
					}
				}
				var ce *ConfigError
				var de *v1alpha1.DecodeError
				if !errors.As(err, &ce) && !errors.As(err, &de) {
					t.Errorf("error %T is neither a *ConfigError nor a *v1alpha1.DecodeError", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if got.Kind != tc.kind || got.For != tc.forKind {
				t.Errorf("got kind %q for %q, want %q for %q", got.Kind, got.For, tc.kind, tc.forKind)
			}
			gotJSON, _ := v1alpha1.Encode(got.Params)
			wantJSON, _ := v1alpha1.Encode(tc.want)
			if string(gotJSON) != string(wantJSON) {
				t.Errorf("params\n got %s\nwant %s", gotJSON, wantJSON)
			}
			if errs := v1alpha1.Validate(got.Params); len(errs) > 0 {
				t.Errorf("result does not validate: %v", errs)
			}
		})
	}
}

// The native mode reads gpudra's parameters exactly as v1alpha1.Decode does
// and nothing of NVIDIA's API.
func TestDecodeNative(t *testing.T) {
	n := Default()
	got, err := n.Decode([]byte(`{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"GpuClaimParameters","sharing":{"strategy":"MPS"}}`))
	if err != nil || got.For != AnyDevice || !got.Params.Sharing.IsMPS() {
		t.Fatalf("Decode = %+v, %v", got, err)
	}
	_, err = n.Decode([]byte(`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig"}`))
	var de *v1alpha1.DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("native Decode of a GpuConfig: %v, want a *v1alpha1.DecodeError", err)
	}
}
