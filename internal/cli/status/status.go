// Package status builds the cluster-wide view of gpudra's GPUs that
// `gpudra status` (also `kubectl gpudra status`) prints: per node, every
// device with its model, memory, health (from its taints) and the
// namespace/pod/claim holding it — from ResourceSlices, ResourceClaims and
// Pods — and its utilization and memory in use from the GPU telemetry of
// the node's kubelet plugin (its /metrics, through the API server's pod
// proxy or a given URL).
package status

import (
	"context"
	"fmt"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Device is one row of the view.
type Device struct {
	Node    string   `json:"node"`
	Pool    string   `json:"pool"`
	Name    string   `json:"name"`
	Type    string   `json:"type"`
	Model   string   `json:"model"`
	UUID    string   `json:"uuid"`
	Memory  string   `json:"memory,omitempty"`
	Health  string   `json:"health"`
	Taints  []string `json:"taints,omitempty"`
	Holders []Holder `json:"holders,omitempty"`
	Shared  bool     `json:"shared,omitempty"`
	// Partition marks a dynamic MIG placement: a device that only exists on
	// the GPU while a claim holds it (it consumes the GPU's counters).
	Partition bool   `json:"partition,omitempty"`
	Slice     string `json:"slice"`
	Driver    string `json:"driver"`
	// Usage is the device's utilization and memory from its plugin's GPU
	// telemetry; nil when not read (see telemetry.go).
	Usage *Usage `json:"usage,omitempty"`
}

// Holder is a claim allocated the device, and the pods using that claim.
type Holder struct {
	Namespace string   `json:"namespace"`
	Claim     string   `json:"claim"`
	Pods      []string `json:"pods,omitempty"`
	Request   string   `json:"request"`
}

// Health values derived from device taints.
const (
	Healthy   = "Healthy"
	Degraded  = "Degraded"  // a NoSchedule taint: keeps running work, gets no new work
	Unhealthy = "Unhealthy" // a NoExecute taint: work is evicted
)

// Collect reads slices, claims and pods of driver and returns the devices
// sorted by node and device name.
func Collect(ctx context.Context, client kubernetes.Interface, driver, node string) ([]Device, error) {
	slices, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list ResourceSlices: %w", err)
	}
	claims, err := client.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list ResourceClaims: %w", err)
	}
	return Build(slices.Items, claims.Items, driver, node), nil
}

// InUse drops the dynamic MIG placements no claim holds: a dynamic-MIG
// GPU publishes every placement of every profile (26 per H100), which would
// bury the GPUs themselves; `gpudra status --all` keeps them.
func InUse(devices []Device) []Device {
	out := devices[:0:0]
	for _, d := range devices {
		if !d.Partition || len(d.Holders) > 0 {
			out = append(out, d)
		}
	}
	return out
}

// Build joins slices and claims (exported for tests and other front ends).
func Build(slices []resourceapi.ResourceSlice, claims []resourceapi.ResourceClaim, driver, node string) []Device {
	byID := map[string]*Device{}
	var out []*Device
	for i := range slices {
		s := &slices[i]
		if s.Spec.Driver != driver {
			continue
		}
		nodeName := ""
		if s.Spec.NodeName != nil {
			nodeName = *s.Spec.NodeName
		}
		if node != "" && nodeName != node {
			continue
		}
		for _, d := range s.Spec.Devices {
			dev := &Device{Node: nodeName, Pool: s.Spec.Pool.Name, Name: d.Name, Slice: s.Name, Driver: driver,
				Type: attr(d, "type"), Model: attr(d, "productName"), UUID: attr(d, "uuid"), Health: Healthy}
			if m, ok := d.Capacity["memory"]; ok {
				dev.Memory = m.Value.String()
			}
			dev.Partition = dev.Type == "mig" && len(d.ConsumesCounters) > 0
			for _, t := range d.Taints {
				dev.Taints = append(dev.Taints, taintString(t))
				switch {
				case t.Effect == resourceapi.DeviceTaintEffectNoExecute:
					dev.Health = Unhealthy
				case dev.Health == Healthy:
					dev.Health = Degraded
				}
			}
			byID[s.Spec.Pool.Name+"/"+d.Name] = dev
			out = append(out, dev)
		}
	}
	for _, c := range claims {
		if c.Status.Allocation == nil {
			continue
		}
		var pods []string
		for _, r := range c.Status.ReservedFor {
			if r.Resource == "pods" {
				pods = append(pods, r.Name)
			}
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			dev, ok := byID[r.Pool+"/"+r.Device]
			if r.Driver != driver || !ok {
				continue
			}
			dev.Holders = append(dev.Holders, Holder{Namespace: c.Namespace, Claim: c.Name, Pods: pods, Request: r.Request})
			dev.Shared = dev.Shared || r.ShareID != nil || (r.AdminAccess != nil && *r.AdminAccess)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Node != out[j].Node {
			return out[i].Node < out[j].Node
		}
		return naturalLess(out[i].Name, out[j].Name)
	})
	devices := make([]Device, len(out))
	for i, d := range out {
		devices[i] = *d
	}
	return devices
}

func attr(d resourceapi.Device, name resourceapi.QualifiedName) string {
	a := d.Attributes[name]
	switch {
	case a.StringValue != nil:
		return *a.StringValue
	case a.VersionValue != nil:
		return *a.VersionValue
	}
	return ""
}

func taintString(t resourceapi.DeviceTaint) string {
	s := t.Key
	if t.Value != "" {
		s += "=" + t.Value
	}
	return s + ":" + string(t.Effect)
}

// naturalLess orders gpu-2 before gpu-10.
func naturalLess(a, b string) bool {
	pa, na := splitNumber(a)
	pb, nb := splitNumber(b)
	if pa != pb || na < 0 || nb < 0 {
		return a < b
	}
	return na < nb
}

func splitNumber(s string) (string, int) {
	i := strings.LastIndexByte(s, '-')
	n := 0
	if i < 0 || i == len(s)-1 {
		return s, -1
	}
	for _, c := range s[i+1:] {
		if c < '0' || c > '9' {
			return s, -1
		}
		n = n*10 + int(c-'0')
	}
	return s[:i], n
}
