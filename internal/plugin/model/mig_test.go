package model

import "testing"

func TestMIGDeviceName(t *testing.T) {
	gpudra := &GPU{Minor: 2}
	nvidia := &GPU{Minor: 2, MIGNaming: NVIDIAMIGNames}
	tests := []struct {
		name      string
		gpu       *GPU
		profile   string
		profileID uint32
		start     int
		want      string
	}{
		{"gpudra", gpudra, "1g.10gb", 19, 3, "gpu-2-mig-1g10gb-3"},
		{"gpudra media extensions", gpudra, "1g.10gb+me", 20, 0, "gpu-2-mig-1g10gbme-0"},
		{"gpudra without media extensions", gpudra, "1g.23gb-me", 21, 0, "gpu-2-mig-1g23gbnome-0"},
		{"nvidia adds the profile ID", nvidia, "1g.10gb", 19, 3, "gpu-2-mig-1g10gb-19-3"},
		{"nvidia media extensions", nvidia, "1g.10gb+me", 20, 0, "gpu-2-mig-1g10gb-me-20-0"},
		{"nvidia without media extensions", nvidia, "1g.23gb-me", 21, 0, "gpu-2-mig-1g23gb-me-21-0"},
		{"nvidia compute instance", nvidia, "1c.3g.40gb", 9, 4, "gpu-2-mig-1c3g40gb-9-4"},
		{"nvidia upper case", nvidia, "7G.80GB", 0, 0, "gpu-2-mig-7g80gb-0-0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := MIGDeviceName(tc.gpu, tc.profile, tc.profileID, tc.start)
			if got != tc.want {
				t.Errorf("MIGDeviceName(%q, %d, %d) = %q, want %q", tc.profile, tc.profileID, tc.start, got, tc.want)
			}
			if !IsMIGDeviceName(got) {
				t.Errorf("IsMIGDeviceName(%q) = false", got)
			}
		})
	}
}
