package computedomain

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpudra/gpudra/internal/shared/compat"
	"github.com/gpudra/gpudra/internal/shared/imex"
)

var names = compat.Names{}.ComputeDomain()

// rawConfig encodes cfg as the controller does (json.Marshal of
// imex.ClaimConfig).
func rawConfig(t *testing.T, cfg imex.ClaimConfig) []byte {
	t.Helper()
	raw, err := json.Marshal(cfg)
	require.NoError(t, err)
	return raw
}

func channelCfg(uid, mode string) imex.ClaimConfig {
	return imex.ClaimConfig{APIVersion: names.ConfigAPIVersion, Kind: names.ChannelConfigKind, DomainID: uid, AllocationMode: mode}
}

func daemonCfg(uid string) imex.ClaimConfig {
	return imex.ClaimConfig{APIVersion: names.ConfigAPIVersion, Kind: names.DaemonConfigKind, DomainID: uid}
}

func TestDecodeConfig(t *testing.T) {
	nv := compat.Names{Mode: compat.NVIDIA}.ComputeDomain()
	for _, tc := range []struct {
		name     string
		names    compat.ComputeDomainNames
		raw      string
		wantKind claimKind
		wantMode string
		wantErr  string
	}{
		{name: "channel", names: names, raw: `{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"ComputeDomainChannelConfig","domainID":"u1","allocationMode":"All"}`,
			wantKind: kindChannel, wantMode: "All"},
		{name: "channel without mode", names: names, raw: `{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"ComputeDomainChannelConfig","domainID":"u1"}`,
			wantKind: kindChannel},
		{name: "daemon", names: names, raw: `{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"ComputeDomainDaemonConfig","domainID":"u1"}`,
			wantKind: kindDaemon},
		{name: "NVIDIA's in the NVIDIA mode", names: nv,
			raw:      `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainChannelConfig","domainID":"u1","allocationMode":"Single"}`,
			wantKind: kindChannel, wantMode: "Single"},
		{name: "NVIDIA's natively", names: names, raw: `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainChannelConfig","domainID":"u1"}`,
			wantErr: `apiVersion "resource.nvidia.com/v1beta1", want "resource.gpudra.io/v1alpha1"`},
		{name: "unknown kind", names: names, raw: `{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"GpuClaimParameters","domainID":"u1"}`,
			wantErr: `kind "GpuClaimParameters", want ComputeDomainChannelConfig or ComputeDomainDaemonConfig`},
		{name: "unknown field", names: names, raw: `{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"ComputeDomainChannelConfig","domainID":"u1","domainId":"u2"}`,
			wantErr: `unknown field "domainId"`},
		{name: "no domain", names: names, raw: `{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"ComputeDomainChannelConfig"}`,
			wantErr: "no domainID"},
		{name: "bad mode", names: names, raw: `{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"ComputeDomainChannelConfig","domainID":"u1","allocationMode":"all"}`,
			wantErr: `allocationMode "all": want "Single" or "All"`},
		{name: "mode on a daemon", names: names, raw: `{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"ComputeDomainDaemonConfig","domainID":"u1","allocationMode":"All"}`,
			wantErr: "only ComputeDomainChannelConfig has one"},
		{name: "trailing data", names: names, raw: `{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"ComputeDomainDaemonConfig","domainID":"u1"} {}`,
			wantErr: "not one JSON object"},
		{name: "duplicate field", names: names, raw: `{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"ComputeDomainDaemonConfig","domainID":"u1","domainID":"u2"}`,
			wantErr: `duplicate field "domainID"`},
		{name: "not JSON", names: names, raw: `kind: x`, wantErr: "decode the compute-domain.gpudra.io configuration"},
		{name: "not an object", names: names, raw: `["x"]`, wantErr: "not one JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, kind, err := DecodeConfig(tc.names, []byte(tc.raw))
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.wantKind, kind)
			assert.Equal(t, "u1", cfg.DomainID)
			assert.Equal(t, tc.wantMode, cfg.AllocationMode)
		})
	}
}

// What the controller encodes, the node side decodes to the same value.
func TestDecodeConfigRoundTrip(t *testing.T) {
	for _, cfg := range []imex.ClaimConfig{channelCfg("a-b", "All"), channelCfg("a-b", ""), daemonCfg("c")} {
		got, _, err := DecodeConfig(names, rawConfig(t, cfg))
		require.NoError(t, err)
		assert.Equal(t, cfg, *got)
	}
}

func TestClaimDevices(t *testing.T) {
	ch := func(req, dev string) resourceapi.DeviceRequestAllocationResult {
		return resourceapi.DeviceRequestAllocationResult{Request: req, Driver: names.Driver, Pool: "node-a", Device: dev}
	}
	opaque := func(cfg imex.ClaimConfig, requests ...string) resourceapi.DeviceAllocationConfiguration {
		return resourceapi.DeviceAllocationConfiguration{Source: resourceapi.AllocationConfigSourceClaim, Requests: requests,
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver: names.Driver, Parameters: rawExtension(rawConfig(t, cfg))}}}
	}
	gpu := resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: "gpu.gpudra.io", Pool: "node-a", Device: "gpu-0"}
	for _, tc := range []struct {
		name     string
		results  []resourceapi.DeviceRequestAllocationResult
		configs  []resourceapi.DeviceAllocationConfiguration
		channels []int
		domain   string
		wantErr  string
	}{
		{name: "one channel", results: []resourceapi.DeviceRequestAllocationResult{ch("channel", "channel-3")},
			configs: []resourceapi.DeviceAllocationConfiguration{opaque(channelCfg("u1", ""), "channel")}, channels: []int{3}, domain: "u1"},
		{name: "GPUs of another driver are left alone", results: []resourceapi.DeviceRequestAllocationResult{gpu, ch("channel", "channel-0")},
			configs: []resourceapi.DeviceAllocationConfiguration{opaque(channelCfg("u1", ""))}, channels: []int{0}, domain: "u1"},
		{name: "the last config wins", results: []resourceapi.DeviceRequestAllocationResult{ch("channel", "channel-0")},
			configs:  []resourceapi.DeviceAllocationConfiguration{opaque(channelCfg("old", "")), opaque(channelCfg("u2", ""), "channel")},
			channels: []int{0}, domain: "u2"},
		{name: "a config of another request does not apply", results: []resourceapi.DeviceRequestAllocationResult{ch("channel", "channel-0")},
			configs: []resourceapi.DeviceAllocationConfiguration{opaque(channelCfg("u1", ""), "other")},
			wantErr: "has no ComputeDomainChannelConfig configuration naming its ComputeDomain"},
		{name: "subrequest", results: []resourceapi.DeviceRequestAllocationResult{ch("channel/a", "channel-1")},
			configs: []resourceapi.DeviceAllocationConfiguration{opaque(channelCfg("u1", ""), "channel")}, channels: []int{1}, domain: "u1"},
		{name: "daemon config on a channel", results: []resourceapi.DeviceRequestAllocationResult{ch("channel", "channel-0")},
			configs: []resourceapi.DeviceAllocationConfiguration{opaque(daemonCfg("u1"))},
			wantErr: "a ComputeDomainDaemonConfig configuration cannot apply to channel device channel-0"},
		{name: "unknown device", results: []resourceapi.DeviceRequestAllocationResult{ch("channel", "channel-4")},
			configs: []resourceapi.DeviceAllocationConfiguration{opaque(channelCfg("u1", ""))},
			wantErr: `device "channel-4" is not one this node publishes (channel-0 to channel-3, daemon-0)`},
		{name: "leading zero", results: []resourceapi.DeviceRequestAllocationResult{ch("channel", "channel-01")},
			configs: []resourceapi.DeviceAllocationConfiguration{opaque(channelCfg("u1", ""))}, wantErr: "is not one this node publishes"},
		{name: "another node's pool", results: []resourceapi.DeviceRequestAllocationResult{{Request: "channel", Driver: names.Driver,
			Pool: "node-b", Device: "channel-0"}}, wantErr: `is in pool "node-b", not this node's ("node-a")`},
		{name: "two domains", results: []resourceapi.DeviceRequestAllocationResult{ch("a", "channel-0"), ch("b", "channel-1")},
			configs: []resourceapi.DeviceAllocationConfiguration{opaque(channelCfg("u1", ""), "a"), opaque(channelCfg("u2", ""), "b")},
			wantErr: "mixes devices of ComputeDomains u1 and u2"},
		{name: "none of ours", results: []resourceapi.DeviceRequestAllocationResult{gpu}, wantErr: "has no device of compute-domain.gpudra.io"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			claim := newClaim("ns", "c", "uid", tc.results, tc.configs)
			got, err := claimDevices(names, "node-a", 4, claim)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			var ids []int
			for _, d := range got {
				ids = append(ids, d.channel)
				assert.Equal(t, tc.domain, d.config.DomainID)
			}
			assert.Equal(t, tc.channels, ids)
		})
	}
	_, err := claimDevices(names, "node-a", 4, &resourceapi.ResourceClaim{})
	require.ErrorContains(t, err, "is not allocated")
}
