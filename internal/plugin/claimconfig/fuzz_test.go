package claimconfig

import (
	"errors"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/shared/compat"
)

// FuzzResolve resolves claims with fuzzed class and claim parameters and
// request names, in both driver modes: Resolve must never panic, and either
// fail or give every device of this node one valid configuration of its own
// (never a shared pointer). Seeds are parameters and requests of the unit
// tests.
func FuzzResolve(f *testing.F) {
	for _, s := range []struct{ class, claim, configRequest, request, device string }{
		{exclusive, short, "", "gpu", "gpu-0"},
		{long, medium, "gpu", "gpu/h100", "gpu-1"},
		{short, `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Long"}}}`,
			"gpu", "gpu", "gpu-0"},
		{"", `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"MigDeviceConfig","sharing":{"strategy":"MPS"}}`, "", "mig", "gpu-0-mig-1g10gb-9"},
		{"", `{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"GpuClaimParameters","sharing":{"strategy":"Sometimes"}}`, "gpu", "gpu", "gpu-0"},
	} {
		f.Add(s.class, s.claim, s.configRequest, s.request, s.device)
	}
	modes := []compat.Names{native, compat.MustResolve(compat.Flags{Compatibility: "nvidia"})}
	f.Fuzz(func(t *testing.T, classParams, claimParams, configRequest, request, device string) {
		for _, names := range modes {
			var requests []string
			if configRequest != "" {
				requests = []string{configRequest}
			}
			var configs []resourceapi.DeviceAllocationConfiguration
			if classParams != "" {
				configs = append(configs, config(resourceapi.AllocationConfigSourceClass, names.Driver, classParams))
			}
			configs = append(configs, config(resourceapi.AllocationConfigSourceClaim, names.Driver, claimParams, requests...))
			claim := newClaim([]resourceapi.DeviceRequestAllocationResult{
				result(request, names.Driver, pool, device), result(request, names.Driver, pool, device+"-b"),
				result(request, names.Driver, "other-node", device), result(request, "other.example.com", pool, device),
			}, configs...)
			got, err := Resolve(claim, names, pool)
			if err != nil {
				var de *v1alpha1.DecodeError
				var ce *compat.ConfigError
				if !errors.As(err, &de) && !errors.As(err, &ce) && !strings.Contains(err.Error(), "cannot be applied to device") {
					t.Fatalf("unexpected error: %v", err)
				}
				if got != nil {
					t.Fatalf("devices returned together with error %v", err)
				}
				continue
			}
			if len(got) != 2 {
				t.Fatalf("got %d devices, want this node's 2 of %s", len(got), names.Driver)
			}
			if got[0].Config == got[1].Config {
				t.Fatal("two devices share one configuration object")
			}
			for _, d := range got {
				if d.Config == nil {
					t.Fatalf("device %s has no configuration", d.Result.Device)
				}
				if errs := v1alpha1.Validate(d.Config); len(errs) > 0 {
					t.Fatalf("device %s has an invalid configuration: %v", d.Result.Device, errs)
				}
			}
		}
	})
}
