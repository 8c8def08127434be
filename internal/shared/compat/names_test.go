package compat

import (
	"strings"
	"testing"
)

func TestResolve(t *testing.T) {
	native := func(driver string) Names {
		return Names{Mode: Native, Driver: driver, GPUClass: "gpu.gpudra.io", MIGClass: "mig.gpudra.io",
			CDIVendor: "k8s." + driver, HealthTaints: TaintsGpudra}
	}
	nvidia := Names{Mode: NVIDIA, Driver: "gpu.nvidia.com", GPUClass: "gpu.nvidia.com", MIGClass: "mig.nvidia.com",
		CDIVendor: "k8s.gpu.nvidia.com", HealthTaints: TaintsNVIDIA}
	nvidiaGpudraTaints := nvidia
	nvidiaGpudraTaints.HealthTaints = TaintsGpudra
	tests := []struct {
		name    string
		flags   Flags
		want    Names
		wantErr string
	}{
		{name: "no flags", want: native("gpu.gpudra.io")},
		{name: "default driver", flags: Flags{Driver: "gpu.gpudra.io"}, want: native("gpu.gpudra.io")},
		{name: "none keeps another driver", flags: Flags{Compatibility: "none", Driver: "gpu.example.com"}, want: native("gpu.example.com")},
		{name: "native spelt out", flags: Flags{Compatibility: " Native "}, want: native("gpu.gpudra.io")},
		{name: "nvidia", flags: Flags{Compatibility: "nvidia"}, want: nvidia},
		{name: "the default driver name gives way", flags: Flags{Compatibility: "NVIDIA", Driver: "gpu.gpudra.io"}, want: nvidia},
		{name: "nvidia with its own driver name", flags: Flags{Compatibility: "nvidia", Driver: "gpu.nvidia.com"}, want: nvidia},
		{name: "NVIDIA's driver name selects its mode", flags: Flags{Driver: "gpu.nvidia.com"}, want: nvidia},
		{name: "nvidia with another driver", flags: Flags{Compatibility: "nvidia", Driver: "gpu.example.com"},
			wantErr: `--driver-name="gpu.example.com" cannot be used with --compatibility=nvidia, which serves gpu.nvidia.com: drop --driver-name`},
		{name: "the CLI's flag name", flags: Flags{Compatibility: "nvidia", Driver: "gpu.example.com", DriverFlag: "--driver"},
			wantErr: `--driver="gpu.example.com" cannot be used with --compatibility=nvidia, which serves gpu.nvidia.com: drop --driver`},
		{name: "nvidia with gpudra's taints", flags: Flags{Compatibility: "nvidia", HealthTaints: "gpudra"}, want: nvidiaGpudraTaints},
		{name: "nvidia with its own taints spelt out", flags: Flags{Compatibility: "nvidia", HealthTaints: " NVIDIA"}, want: nvidia},
		{name: "native with gpudra's taints spelt out", flags: Flags{HealthTaints: "gpudra"}, want: native("gpu.gpudra.io")},
		{name: "NVIDIA's taints need the NVIDIA mode", flags: Flags{HealthTaints: "nvidia"},
			wantErr: `--health-taints="nvidia" needs --compatibility=nvidia: natively the taints are gpudra's ("gpudra"); drop --health-taints`},
		{name: "unknown taint schema", flags: Flags{Compatibility: "nvidia", HealthTaints: "amd"},
			wantErr: `--health-taints="amd" is not supported: use "nvidia"`},
		{name: "unknown mode", flags: Flags{Compatibility: "amd"},
			wantErr: `--compatibility="amd" is not supported: use "nvidia" (NVIDIA's DRA driver names and API) or leave it empty`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Resolve(tc.flags)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Resolve(%+v) error = %v, want %q", tc.flags, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Resolve(%+v) = %+v, %v; want %+v", tc.flags, got, err, tc.want)
			}
		})
	}
}

func TestDefault(t *testing.T) {
	if got, want := Default().Driver, "gpu.gpudra.io"; got != want {
		t.Fatalf("Default().Driver = %q, want %q", got, want)
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
		n := MustResolve(Flags{Driver: tc.driver})
		got := n.TaintKey(tc.in)
		if got != tc.want {
			t.Errorf("%s: TaintKey(%q) = %q, want %q", tc.driver, tc.in, got, tc.want)
		}
	}
}
