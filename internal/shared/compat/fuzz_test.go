package compat

import (
	"errors"
	"testing"

	"github.com/gpudra/gpudra/api/v1alpha1"
)

// FuzzDecodeNVIDIA feeds the NVIDIA-mode decoder arbitrary parameters: it
// must never panic, fail only with a *ConfigError or *v1alpha1.DecodeError
// and no object, and accept only configurations whose GpuClaimParameters
// are valid, for the device kind their kind applies to. Seeds are the
// cases of TestDecodeNVIDIA; findings are kept in testdata/fuzz.
func FuzzDecodeNVIDIA(f *testing.F) {
	for _, seed := range []string{
		`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig"}`,
		`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Long"}}}`,
		"apiVersion: resource.nvidia.com/v1beta1\nkind: GpuConfig\nsharing:\n  strategy: TimeSlicing\n  timeSlicingConfig:\n    interval: Short\n",
		`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{
		  "defaultActiveThreadPercentage":50,"defaultPinnedDeviceMemoryLimit":"10Gi","defaultPerDevicePinnedMemoryLimit":{"0":"5Gi","1":"2Gi"}}}}`,
		`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"MigDeviceConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":25}}}`,
		`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"MigDeviceConfig","sharing":{"strategy":"TimeSlicing"}}`,
		`{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"GpuClaimParameters","sharing":{"strategy":"Exclusive"}}`,
		`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"VfioDeviceConfig"}`,
		`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsconfig":{}}}`,
	} {
		f.Add([]byte(seed))
	}
	nv := MustResolve(Flags{Compatibility: "nvidia"})
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := nv.Decode(raw)
		if err != nil {
			var ce *ConfigError
			var de *v1alpha1.DecodeError
			if !errors.As(err, &ce) && !errors.As(err, &de) {
				t.Fatalf("error is neither a *ConfigError nor a *v1alpha1.DecodeError: %T %v", err, err)
			}
			if c != nil {
				t.Fatalf("config returned together with error %v", err)
			}
			return
		}
		if c.Params == nil {
			t.Fatalf("accepted %q without parameters", raw)
		}
		if errs := v1alpha1.Validate(c.Params); len(errs) > 0 {
			t.Fatalf("accepted %q gives invalid parameters: %v", raw, errs)
		}
		want := map[string]DeviceKind{GpuConfigKind: WholeGPU, MigDeviceConfigKind: MIGDevice, v1alpha1.Kind: AnyDevice}
		if k, ok := want[c.Kind]; !ok || k != c.For {
			t.Fatalf("accepted %q as kind %q for devices %q", raw, c.Kind, c.For)
		}
	})
}
