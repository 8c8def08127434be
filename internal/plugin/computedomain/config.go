package computedomain

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	sigsjson "sigs.k8s.io/json"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/shared/compat"
	"github.com/gpudra/gpudra/internal/shared/imex"
)

// claimKind says what a claim's device of the channel driver is for.
type claimKind string

const (
	kindChannel claimKind = TypeChannel
	kindDaemon  claimKind = TypeDaemon
)

// DecodeConfig reads one opaque configuration of the channel driver
// strictly: apiVersion and kind must be names' (the controller writes
// them, see internal/controller/computedomain), unknown fields are
// refused, domainID is required, and allocationMode belongs to channel
// configurations only (empty there means Single).
func DecodeConfig(names compat.ComputeDomainNames, raw []byte) (*imex.ClaimConfig, claimKind, error) {
	var cfg imex.ClaimConfig
	if !json.Valid(raw) || len(bytes.TrimSpace(raw)) == 0 || bytes.TrimSpace(raw)[0] != '{' {
		return nil, "", fmt.Errorf("decode the %s configuration: not one JSON object", names.Driver)
	}
	// Case-sensitive, with unknown and duplicate fields refused.
	strictErrs, err := sigsjson.UnmarshalStrict(raw, &cfg, sigsjson.DisallowUnknownFields, sigsjson.DisallowDuplicateFields)
	if err != nil {
		return nil, "", fmt.Errorf("decode the %s configuration: %w", names.Driver, err)
	}
	if len(strictErrs) > 0 {
		return nil, "", fmt.Errorf("decode the %s configuration: %w (field names are case-sensitive)", names.Driver, errors.Join(strictErrs...))
	}
	if cfg.APIVersion != names.ConfigAPIVersion {
		return nil, "", fmt.Errorf("%s configuration: apiVersion %q, want %q", names.Driver, cfg.APIVersion, names.ConfigAPIVersion)
	}
	var kind claimKind
	switch cfg.Kind {
	case names.ChannelConfigKind:
		kind = kindChannel
		switch v1alpha1.ChannelAllocationMode(cfg.AllocationMode) {
		case "", v1alpha1.SingleChannel, v1alpha1.AllChannels:
		default:
			return nil, "", fmt.Errorf("%s: allocationMode %q: want %q or %q", cfg.Kind, cfg.AllocationMode,
				v1alpha1.SingleChannel, v1alpha1.AllChannels)
		}
	case names.DaemonConfigKind:
		kind = kindDaemon
		if cfg.AllocationMode != "" {
			return nil, "", fmt.Errorf("%s: allocationMode %q: only %s has one", cfg.Kind, cfg.AllocationMode, names.ChannelConfigKind)
		}
	default:
		return nil, "", fmt.Errorf("%s configuration: kind %q, want %s or %s", names.Driver, cfg.Kind,
			names.ChannelConfigKind, names.DaemonConfigKind)
	}
	if cfg.DomainID == "" {
		return nil, "", fmt.Errorf("%s: no domainID: the configuration must name the ComputeDomain's UID "+
			"(use the ResourceClaimTemplate the ComputeDomain's controller created)", cfg.Kind)
	}
	return &cfg, kind, nil
}

// deviceRequest is one allocated device of the channel driver in a claim
// with the configuration that applies to it.
type deviceRequest struct {
	result resourceapi.DeviceRequestAllocationResult
	kind   claimKind
	// channel is the channel's number (channel-<n>); -1 for the daemon.
	channel int
	config  *imex.ClaimConfig
}

// parseDevice returns a device's kind and channel number from its name.
func parseDevice(name string, channels int) (claimKind, int, error) {
	if name == DaemonDeviceName {
		return kindDaemon, -1, nil
	}
	if s, ok := strings.CutPrefix(name, TypeChannel+"-"); ok {
		id, err := strconv.Atoi(s)
		if err == nil && id >= 0 && id < channels && strconv.Itoa(id) == s {
			return kindChannel, id, nil
		}
	}
	return "", 0, fmt.Errorf("device %q is not one this node publishes (channel-0 to channel-%d, %s)", name, channels-1, DaemonDeviceName)
}

// claimDevices returns the claim's devices of names.Driver on this node's
// pool, each with the configuration that applies to it (the last one
// naming its request, or naming no request, wins: class configurations
// come first, the claim's after them).
func claimDevices(names compat.ComputeDomainNames, pool string, channels int, claim *resourceapi.ResourceClaim) ([]deviceRequest, error) {
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)
	}
	alloc := claim.Status.Allocation.Devices
	var out []deviceRequest
	for _, r := range alloc.Results {
		if r.Driver != names.Driver {
			continue
		}
		if r.Pool != pool {
			return nil, fmt.Errorf("claim %s/%s: device %s is in pool %q, not this node's (%q)", claim.Namespace, claim.Name,
				r.Device, r.Pool, pool)
		}
		kind, id, err := parseDevice(r.Device, channels)
		if err != nil {
			return nil, fmt.Errorf("claim %s/%s: %w", claim.Namespace, claim.Name, err)
		}
		d := deviceRequest{result: r, kind: kind, channel: id}
		for _, c := range alloc.Config {
			if c.Opaque == nil || c.Opaque.Driver != names.Driver || !appliesTo(c.Requests, r.Request) {
				continue
			}
			cfg, cfgKind, err := DecodeConfig(names, c.Opaque.Parameters.Raw)
			if err != nil {
				return nil, fmt.Errorf("claim %s/%s, request %s: %w", claim.Namespace, claim.Name, r.Request, err)
			}
			if cfgKind != kind {
				return nil, fmt.Errorf("claim %s/%s: a %s configuration cannot apply to %s device %s (request %s)",
					claim.Namespace, claim.Name, cfg.Kind, kind, r.Device, r.Request)
			}
			d.config = cfg
		}
		if d.config == nil {
			want := names.ChannelConfigKind
			if kind == kindDaemon {
				want = names.DaemonConfigKind
			}
			return nil, fmt.Errorf("claim %s/%s: device %s (request %s) has no %s configuration naming its ComputeDomain: "+
				"claim IMEX channels through the ResourceClaimTemplate a ComputeDomain creates", claim.Namespace, claim.Name,
				r.Device, r.Request, want)
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("claim %s/%s has no device of %s", claim.Namespace, claim.Name, names.Driver)
	}
	domain := out[0].config.DomainID
	for _, d := range out[1:] {
		if d.kind != out[0].kind || d.config.DomainID != domain {
			return nil, fmt.Errorf("claim %s/%s mixes devices of ComputeDomains %s and %s or channels and daemons: "+
				"a claim serves one domain's channels or its daemon", claim.Namespace, claim.Name, domain, d.config.DomainID)
		}
	}
	return out, nil
}

func appliesTo(requests []string, request string) bool {
	if len(requests) == 0 {
		return true
	}
	for _, r := range requests {
		// A subrequest's result is named <request>/<subrequest>.
		if r == request || strings.HasPrefix(request, r+"/") {
			return true
		}
	}
	return false
}
