package computedomain

import (
	"context"
	"fmt"
	"os"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdiparser "tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// cdiClass is the CDI class of the channel driver's per-claim specs; the
// vendor is "k8s.<driver>" (k8s.compute-domain.gpudra.io).
const cdiClass = "claim"

// Claims serves the channel driver's claims in the shape of
// kubeletplugin.DRAPlugin's PrepareResourceClaims and
// UnprepareResourceClaims: Node's prepare and unprepare, and one CDI spec
// per prepared claim. A DRAPlugin of the channel driver delegates to it
// (it does not implement WatchHealthStatus, so it is not a DRAPlugin).
type Claims struct {
	node   *Node
	vendor string
	cache  *cdiapi.Cache
}

// NewClaims writes specs into cdiDir (e.g. /var/run/cdi).
func NewClaims(node *Node, cdiDir string) (*Claims, error) {
	if err := os.MkdirAll(cdiDir, 0o755); err != nil {
		return nil, fmt.Errorf("create CDI spec directory %s: %w", cdiDir, err)
	}
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(cdiDir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("open CDI spec directory %s: %w", cdiDir, err)
	}
	return &Claims{node: node, vendor: "k8s." + node.cfg.Names.Driver, cache: cache}, nil
}

func (c *Claims) specName(claimUID types.UID) string {
	return cdiapi.GenerateTransientSpecName(c.vendor, cdiClass, string(claimUID)) + ".json"
}

// DeviceID is the CDI device ID of a claim's device.
func (c *Claims) DeviceID(claimUID types.UID, device string) string {
	return cdiparser.QualifiedName(c.vendor, cdiClass, string(claimUID)+"-"+device)
}

// PrepareResourceClaims prepares each claim on its own: one claim's error
// (a daemon not ready yet) is that claim's result only.
func (c *Claims) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		devices, err := c.prepare(ctx, claim)
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Prepare of a ComputeDomain claim failed", "claim", klog.KObj(claim), "err", err)
		}
		out[claim.UID] = kubeletplugin.PrepareResult{Devices: devices, Err: err}
	}
	return out, nil
}

func (c *Claims) prepare(ctx context.Context, claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	prepared, err := c.node.Prepare(ctx, claim)
	if err != nil {
		return nil, err
	}
	spec := &cdispec.Spec{Kind: c.vendor + "/" + cdiClass}
	devices := make([]kubeletplugin.Device, 0, len(prepared))
	for _, d := range prepared {
		name := string(claim.UID) + "-" + d.Device
		if err := cdiparser.ValidateDeviceName(name); err != nil {
			return nil, fmt.Errorf("CDI spec of claim %s/%s: device name %q: %w", claim.Namespace, claim.Name, name, err)
		}
		spec.Devices = append(spec.Devices, cdispec.Device{Name: name, ContainerEdits: *d.Edits})
		devices = append(devices, kubeletplugin.Device{Requests: d.Requests, PoolName: d.Pool, DeviceName: d.Device,
			CDIDeviceIDs: []string{c.DeviceID(claim.UID, d.Device)}})
	}
	version, err := cdispec.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, fmt.Errorf("CDI version of claim %s/%s's spec: %w", claim.Namespace, claim.Name, err)
	}
	spec.Version = version
	if err := c.cache.WriteSpec(spec, c.specName(claim.UID)); err != nil {
		return nil, fmt.Errorf("write the CDI spec of claim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	return devices, nil
}

// UnprepareResourceClaims unprepares each claim (Node.Unprepare) and then
// removes its CDI spec; a claim whose unprepare failed keeps its spec.
func (c *Claims) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, claim := range claims {
		err := c.node.Unprepare(ctx, claim.UID)
		if err == nil {
			if rmErr := c.cache.RemoveSpec(c.specName(claim.UID)); rmErr != nil { // a missing spec is none
				err = fmt.Errorf("remove the CDI spec of claim %s: %w", claim.NamespacedName, rmErr)
			}
		}
		out[claim.UID] = err
	}
	return out, nil
}

// HandleError logs what the helper could not do (publishing slices).
func (c *Claims) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).Error(err, msg)
}
