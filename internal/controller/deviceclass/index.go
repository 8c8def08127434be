package deviceclass

import (
	"context"
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpudra/gpudra/internal/shared/compat"
)

// Informer index names.
const (
	// modelIndex maps a per-model class name to the ResourceSlices that
	// have a GPU of that model, and a per-profile MIG class name to those
	// that have a MIG device of that profile.
	modelIndex = "gpudra-model-class"
	// classIndex maps a DeviceClass name to the ResourceClaims whose spec
	// references it.
	classIndex = "gpudra-device-class"
)

// attribute returns a device attribute given either unqualified (the driver's
// own domain) or qualified with the driver name.
func attribute(n compat.Names, d *resourceapi.Device, name string) (resourceapi.DeviceAttribute, bool) {
	if a, ok := d.Attributes[resourceapi.QualifiedName(name)]; ok {
		return a, true
	}
	a, ok := d.Attributes[resourceapi.QualifiedName(n.Attribute(name))]
	return a, ok
}

// sliceMIGProfiles lists the profiles of the MIG devices (type "mig") in a
// slice of the driver n, each once: existing ones (static MIG) and the
// placements of dynamic MIG alike.
func sliceMIGProfiles(n compat.Names, s *resourceapi.ResourceSlice) []string {
	return sliceValues(n, s, "mig", "profile")
}

// sliceProducts lists the productNames of the whole GPUs (type "gpu") in a
// slice of the driver n, each once.
func sliceProducts(n compat.Names, s *resourceapi.ResourceSlice) []string {
	return sliceValues(n, s, "gpu", "productName")
}

// sliceValues lists the non-blank values of the string attribute attr of the
// devices of type deviceType in a slice of the driver n, each once, in slice
// order.
func sliceValues(n compat.Names, s *resourceapi.ResourceSlice, deviceType, attr string) []string {
	if s.Spec.Driver != n.Driver {
		return nil
	}
	var out []string
	for i := range s.Spec.Devices {
		d := &s.Spec.Devices[i]
		typ, ok := attribute(n, d, "type")
		if !ok || typ.StringValue == nil || *typ.StringValue != deviceType {
			continue
		}
		v, ok := attribute(n, d, attr)
		if !ok || v.StringValue == nil || strings.TrimSpace(*v.StringValue) == "" {
			continue
		}
		if !slices.Contains(out, *v.StringValue) {
			out = append(out, *v.StringValue)
		}
	}
	return out
}

// indexSliceModels returns the modelIndex function of the driver n: the
// per-model class names of a slice's GPUs and the per-profile class names of
// its MIG devices. Models and profiles whose name cannot be turned into a
// class name are skipped.
func indexSliceModels(n compat.Names) func(obj any) ([]string, error) {
	return func(obj any) ([]string, error) {
		s, ok := obj.(*resourceapi.ResourceSlice)
		if !ok {
			return nil, nil
		}
		var names []string
		for _, p := range sliceProducts(n, s) {
			if name, err := classNameForProduct(n, p); err == nil && !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
		for _, p := range sliceMIGProfiles(n, s) {
			if name, err := classNameForMIGProfile(n, p); err == nil && !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
		return names, nil
	}
}

// indexClaimClasses is the classIndex function: the DeviceClass names a
// claim's requests and firstAvailable subrequests name.
func indexClaimClasses(obj any) ([]string, error) {
	claim, ok := obj.(*resourceapi.ResourceClaim)
	if !ok {
		return nil, nil
	}
	var names []string
	add := func(n string) {
		if n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	for _, r := range claim.Spec.Devices.Requests {
		if r.Exactly != nil {
			add(r.Exactly.DeviceClassName)
		}
		for _, sub := range r.FirstAvailable {
			add(sub.DeviceClassName)
		}
	}
	return names, nil
}

// liveClaimUsing lists the ResourceClaims of every namespace from the API
// server, a page at a time, and returns one whose requests name the
// DeviceClass name, or nil. Only a delete asks, and deletes are rare (the
// last GPU of a model or MIG device of a profile left the cluster).
func (c *Controller) liveClaimUsing(ctx context.Context, name string) (*resourceapi.ResourceClaim, error) {
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := c.client.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list ResourceClaims to confirm that none uses DeviceClass %s before deleting it: %w", name, err)
		}
		for i := range list.Items {
			names, _ := indexClaimClasses(&list.Items[i])
			if slices.Contains(names, name) {
				return &list.Items[i], nil
			}
		}
		if list.Continue == "" {
			return nil, nil
		}
		opts.Continue = list.Continue
	}
}
