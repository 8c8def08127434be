package compat

import (
	"testing"
)

func TestForDriver(t *testing.T) {
	tests := []struct {
		driver string
		want   Names
	}{
		{"", Names{Mode: Native, Driver: "gpu.gpudra.io", GPUClass: "gpu.gpudra.io", MIGClass: "mig.gpudra.io", CDIVendor: "k8s.gpu.gpudra.io"}},
		{"gpu.gpudra.io", Names{Mode: Native, Driver: "gpu.gpudra.io", GPUClass: "gpu.gpudra.io", MIGClass: "mig.gpudra.io", CDIVendor: "k8s.gpu.gpudra.io"}},
		{"gpu.example.com", Names{Mode: Native, Driver: "gpu.example.com", GPUClass: "gpu.gpudra.io", MIGClass: "mig.gpudra.io", CDIVendor: "k8s.gpu.example.com"}},
		{"gpu.nvidia.com", Names{Mode: NVIDIA, Driver: "gpu.nvidia.com", GPUClass: "gpu.nvidia.com", MIGClass: "mig.nvidia.com", CDIVendor: "k8s.gpu.nvidia.com"}},
	}
	for _, tc := range tests {
		if got := ForDriver(tc.driver); got != tc.want {
			t.Errorf("ForDriver(%q) = %+v, want %+v", tc.driver, got, tc.want)
		}
	}
}

func TestModeAndDriver(t *testing.T) {
	tests := []struct {
		flag, driver string
		want         string
		wantErr      bool
	}{
		{"", "", "gpu.gpudra.io", false},
		{"none", "gpu.example.com", "gpu.example.com", false},
		{"nvidia", "", "gpu.nvidia.com", false},
		{"NVIDIA", "gpu.gpudra.io", "gpu.nvidia.com", false}, // the flag's default name gives way
		{"nvidia", "gpu.nvidia.com", "gpu.nvidia.com", false},
		{"nvidia", "gpu.example.com", "", true},
		{"amd", "", "", true},
	}
	for _, tc := range tests {
		mode, err := ParseMode(tc.flag)
		var got string
		if err == nil {
			got, err = DriverFor(mode, tc.driver)
		}
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("mode %q driver %q: got %q, %v; want %q (error %v)", tc.flag, tc.driver, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestTaintKeys(t *testing.T) {
	for _, tc := range []struct {
		driver, in, want string
	}{
		{"gpu.gpudra.io", "gpu.gpudra.io/xid", "gpu.gpudra.io/xid"},
		{"gpu.nvidia.com", "gpu.gpudra.io/xid", "gpu.nvidia.com/xid"},
		{"gpu.nvidia.com", "gpu.gpudra.io/recovery-action", "gpu.nvidia.com/recovery-action"},
		{"gpu.nvidia.com", "example.com/other", "example.com/other"},
	} {
		n := ForDriver(tc.driver)
		got := n.TaintKey(tc.in)
		if got != tc.want {
			t.Errorf("%s: TaintKey(%q) = %q, want %q", tc.driver, tc.in, got, tc.want)
		}
	}
}
