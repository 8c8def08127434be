package gpuverify

import (
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// checkSlices checks ResourceSlices against the limits the API server
// enforces (k8s.io/api/resource/v1 constants; the validation code itself
// lives in k8s.io/kubernetes, which gpudra does not import). internal/plugin/slice
// already refuses most of these while building; this is the independent
// look at its output, with the GPU's real names and values.
func checkSlices(driverName string, slices []resourceapi.ResourceSlice) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, "- "+fmt.Sprintf(format, args...)) }
	if errs := validation.IsDNS1123Subdomain(driverName); len(errs) > 0 || len(driverName) > resourceapi.DriverNameMaxLength {
		add("driver name %q is not a DNS subdomain of at most %d characters", driverName, resourceapi.DriverNameMaxLength)
	}
	seen := map[string]bool{}
	for _, s := range slices {
		pool := s.Spec.Pool.Name
		if errs := validation.IsDNS1123Subdomain(pool); len(errs) > 0 {
			add("slice %s: pool name %q: %s", s.Name, pool, strings.Join(errs, "; "))
		}
		if s.Spec.Pool.ResourceSliceCount != int64(len(slices)) {
			add("slice %s: resourceSliceCount %d, but the pool has %d slices", s.Name, s.Spec.Pool.ResourceSliceCount, len(slices))
		}
		max := resourceapi.ResourceSliceMaxDevices
		for _, d := range s.Spec.Devices {
			if len(d.ConsumesCounters) > 0 || len(d.Taints) > 0 {
				max = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
			}
		}
		if len(s.Spec.Devices) > max {
			add("slice %s: %d devices, the API allows %d", s.Name, len(s.Spec.Devices), max)
		}
		if len(s.Spec.SharedCounters) > resourceapi.ResourceSliceMaxCounterSets {
			add("slice %s: %d counter sets, the API allows %d", s.Name, len(s.Spec.SharedCounters), resourceapi.ResourceSliceMaxCounterSets)
		}
		for _, cs := range s.Spec.SharedCounters {
			if len(cs.Counters) > resourceapi.ResourceSliceMaxCountersPerCounterSet {
				add("slice %s: counter set %s has %d counters, the API allows %d", s.Name, cs.Name, len(cs.Counters),
					resourceapi.ResourceSliceMaxCountersPerCounterSet)
			}
		}
		for _, d := range s.Spec.Devices {
			if seen[d.Name] {
				add("device %s appears twice in pool %s", d.Name, pool)
			}
			seen[d.Name] = true
			for _, p := range checkDevice(d) {
				add("device %s: %s", d.Name, p)
			}
		}
	}
	return problems
}

func checkDevice(d resourceapi.Device) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if errs := validation.IsDNS1123Label(d.Name); len(errs) > 0 {
		add("name is not a DNS label: %s", strings.Join(errs, "; "))
	}
	if n := len(d.Attributes) + len(d.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
		add("%d attributes and capacities, the API allows %d", n, resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice)
	}
	for name, a := range d.Attributes {
		if p := checkQualifiedName(string(name)); p != "" {
			add("attribute %s: %s", name, p)
		}
		set := 0
		for _, v := range []*string{a.StringValue, a.VersionValue} {
			if v != nil {
				set++
				if len(*v) > resourceapi.DeviceAttributeMaxValueLength {
					add("attribute %s: value %q is longer than %d characters", name, *v, resourceapi.DeviceAttributeMaxValueLength)
				}
			}
		}
		if a.IntValue != nil {
			set++
		}
		if a.BoolValue != nil {
			set++
		}
		if set != 1 {
			add("attribute %s has %d values, exactly one is allowed", name, set)
		}
	}
	for name := range d.Capacity {
		if p := checkQualifiedName(string(name)); p != "" {
			add("capacity %s: %s", name, p)
		}
	}
	if len(d.ConsumesCounters) > resourceapi.ResourceSliceMaxDeviceCounterConsumptionsPerDevice {
		add("consumes %d counter sets, the API allows %d", len(d.ConsumesCounters), resourceapi.ResourceSliceMaxDeviceCounterConsumptionsPerDevice)
	}
	if len(d.Taints) > resourceapi.DeviceTaintsMaxLength {
		add("%d taints, the API allows %d", len(d.Taints), resourceapi.DeviceTaintsMaxLength)
	}
	return problems
}

// checkQualifiedName checks an attribute or capacity name: an identifier
// of at most 32 characters, optionally prefixed by "<DNS subdomain>/".
func checkQualifiedName(name string) string {
	id := name
	if i := strings.LastIndex(name, "/"); i >= 0 {
		domain := name[:i]
		id = name[i+1:]
		if errs := validation.IsDNS1123Subdomain(domain); len(errs) > 0 || len(domain) > resourceapi.DeviceMaxDomainLength {
			return fmt.Sprintf("domain %q is not a DNS subdomain of at most %d characters", domain, resourceapi.DeviceMaxDomainLength)
		}
	}
	if id == "" || len(id) > resourceapi.DeviceMaxIDLength || !isCIdentifier(id) {
		return fmt.Sprintf("%q is not a C identifier of at most %d characters", id, resourceapi.DeviceMaxIDLength)
	}
	return ""
}

func isCIdentifier(s string) bool {
	for i, c := range s {
		letter := c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}
