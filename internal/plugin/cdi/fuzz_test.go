package cdi

import (
	"testing"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpudra/gpudra/internal/plugin/model"
)

// FuzzSpec builds and writes claim specs from fuzzed claim UIDs, device
// names, product names, MIG instances and extra environment values: Spec must
// never panic, and every spec it builds must be one the CDI library (as a
// runtime) loads and whose devices it resolves, or Spec must refuse it with
// an error. Seeds are the devices of the unit tests.
func FuzzSpec(f *testing.F) {
	f.Add(uid, "gpu-0", 0, "NVIDIA H100 80GB HBM3", false, 0, 0, "", "TimeSlicing")
	f.Add(uid, "gpu-3", 3, "NVIDIA H100 80GB HBM3", false, 0, 0, "", "")
	f.Add(uid, "gpu-0-mig-1g10gb-9", 0, "NVIDIA H100 80GB HBM3", true, 9, 0, "1g.10gb", "/mps")
	f.Add("../etc", "gpu-0", 0, "", false, 0, 0, "", "")
	f.Fuzz(func(t *testing.T, claimUID, deviceName string, minor int, product string, mig bool, gi, ci int, profile, env string) {
		if minor < 0 || minor > 255 || gi < 0 || gi > 64 || ci < 0 || ci > 64 {
			return // the driver's minors and instance IDs are small; the device nodes need them
		}
		gpu := model.GPU{Minor: minor, UUID: "GPU-aaaaaaaa-0000-0000-0000-000000000000", ProductName: product}
		d := ClaimDevice{DeviceName: deviceName, GPU: &gpu, RequestUUIDs: []string{gpu.UUID}}
		// The plugin builds Env entries as KEY=value; the value is fuzzed.
		d.Env = []string{"GPUDRA_FUZZ=" + env}
		if mig {
			d.MIG = &MIGInstance{UUID: "MIG-bbbbbbbb-0000-0000-0000-000000000000", GIID: gi, CIID: ci, Profile: profile}
		}
		edits, err := NewCachedEdits(SimulatedEdits{}, []model.GPU{gpu})
		if err != nil {
			t.Fatal(err)
		}
		w, err := NewWriter(t.TempDir(), edits)
		if err != nil {
			t.Fatal(err)
		}
		w.SetMIGCaps(SimulatedMIGCaps{})
		spec, err := w.Spec(claimUID, []ClaimDevice{d})
		if err != nil {
			return
		}
		if model.ValidateUID(claimUID) != nil {
			t.Fatalf("spec built for invalid claim UID %q", claimUID)
		}
		ids, err := w.WriteClaim(claimUID, []ClaimDevice{d})
		if err != nil {
			t.Fatalf("Spec accepted the device, but its spec cannot be written: %v\nspec: %+v", err, spec)
		}
		cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(w.Dir()), cdiapi.WithAutoRefresh(false))
		if err != nil {
			t.Fatal(err)
		}
		if errs := cache.GetErrors(); len(errs) > 0 {
			t.Fatalf("the CDI cache rejects the written spec: %v", errs)
		}
		if cache.GetDevice(ids[deviceName]) == nil {
			t.Fatalf("device %q of the written spec does not resolve", ids[deviceName])
		}
	})
}
