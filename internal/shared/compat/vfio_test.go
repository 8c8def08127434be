package compat

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPassthroughNames(t *testing.T) {
	tests := []struct {
		name  string
		flags Flags
		class string
	}{
		{"native, off", Flags{}, ""},
		{"native, on", Flags{Passthrough: true}, NativeVFIOClass},
		{"nvidia, off", Flags{Compatibility: "nvidia"}, ""},
		{"nvidia, on", Flags{Compatibility: "nvidia", Passthrough: true}, NVIDIAVFIOClass},
		{"another native driver name, on", Flags{Driver: "gpu.example.com", Passthrough: true}, NativeVFIOClass},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := MustResolve(tc.flags)
			require.Equal(t, tc.flags.Passthrough, n.Passthrough)
			require.Equal(t, tc.class, n.VFIOClass)
		})
	}
}

func TestDecodeVfioDeviceConfig(t *testing.T) {
	on := MustResolve(Flags{Compatibility: "nvidia", Passthrough: true})
	off := MustResolve(Flags{Compatibility: "nvidia"})
	const head = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"VfioDeviceConfig"`
	tests := []struct {
		name   string
		names  Names
		raw    string
		want   *VFIOConfig
		errHas []string
	}{
		{name: "defaults: legacy, no API device", names: on, raw: head + `}`, want: &VFIOConfig{}},
		{name: "empty iommu", names: on, raw: head + `,"iommu":{}}`, want: &VFIOConfig{}},
		{name: "API device", names: on, raw: head + `,"iommu":{"backendPolicy":"LegacyOnly","enableAPIDevice":true}}`,
			want: &VFIOConfig{APIDevice: true}},
		{name: "PreferIommuFD", names: on, raw: head + `,"iommu":{"backendPolicy":"PreferIommuFD","enableAPIDevice":false}}`,
			want: &VFIOConfig{PreferIOMMUFD: true}},
		{name: "YAML", names: on, raw: "apiVersion: resource.nvidia.com/v1beta1\nkind: VfioDeviceConfig\niommu:\n  enableAPIDevice: true\n",
			want: &VFIOConfig{APIDevice: true}},
		{name: "unknown policy", names: on, raw: head + `,"iommu":{"backendPolicy":"IommuFDOnly"}}`,
			errHas: []string{"iommu.backendPolicy", "IommuFDOnly", "LegacyOnly", "PreferIommuFD"}},
		{name: "misspelt field", names: on, raw: head + `,"iommu":{"enableApiDevice":true}}`, errHas: []string{"enableApiDevice"}},
		{name: "unknown top-level field", names: on, raw: head + `,"sharing":{}}`, errHas: []string{"sharing"}},
		{name: "duplicate field", names: on, raw: head + `,"iommu":{},"iommu":{}}`, errHas: []string{"iommu"}},
		{name: "passthrough off", names: off, raw: head + `}`,
			errHas: []string{"VfioDeviceConfig is not supported", "kubeletPlugin.passthrough=true", "--passthrough"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tc.names.Decode([]byte(tc.raw))
			if tc.errHas != nil {
				require.Error(t, err)
				for _, s := range tc.errHas {
					require.ErrorContains(t, err, s)
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, VfioDeviceConfigKind, c.Kind)
			require.Equal(t, VFIODevice, c.For)
			require.Equal(t, tc.want, c.VFIO)
			require.NotNil(t, c.Params)
		})
	}
	t.Run("other kinds carry no VFIO request", func(t *testing.T) {
		c, err := on.Decode([]byte(`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig"}`))
		require.NoError(t, err)
		require.Nil(t, c.VFIO)
	})
}
