package claimconfig

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/shared/compat"
)

// native are the names Resolve serves in these tests: driver gpu.gpudra.io.
var native = compat.Default()

const (
	driver = v1alpha1.DriverName
	pool   = "node-a"
)

func result(request, drv, pl, device string) resourceapi.DeviceRequestAllocationResult {
	return resourceapi.DeviceRequestAllocationResult{Request: request, Driver: drv, Pool: pl, Device: device}
}

func gpu(request, device string) resourceapi.DeviceRequestAllocationResult {
	return result(request, driver, pool, device)
}

func config(source resourceapi.AllocationConfigSource, drv, params string, requests ...string) resourceapi.DeviceAllocationConfiguration {
	return resourceapi.DeviceAllocationConfiguration{
		Source:   source,
		Requests: requests,
		DeviceConfiguration: resourceapi.DeviceConfiguration{
			Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver:     drv,
				Parameters: runtime.RawExtension{Raw: []byte(params)},
			},
		},
	}
}

func fromClass(params string, requests ...string) resourceapi.DeviceAllocationConfiguration {
	return config(resourceapi.AllocationConfigSourceClass, driver, params, requests...)
}

func fromClaim(params string, requests ...string) resourceapi.DeviceAllocationConfiguration {
	return config(resourceapi.AllocationConfigSourceClaim, driver, params, requests...)
}

func newClaim(results []resourceapi.DeviceRequestAllocationResult, configs ...resourceapi.DeviceAllocationConfiguration) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "train-gpus"},
		Status: resourceapi.ResourceClaimStatus{
			Allocation: &resourceapi.AllocationResult{
				Devices: resourceapi.DeviceAllocationResult{Results: results, Config: configs},
			},
		},
	}
}

const (
	exclusive = `{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"GpuClaimParameters"}`
	short     = `{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"GpuClaimParameters","sharing":{"strategy":"TimeSlicing","timeSlicing":{"interval":"Short"}}}`
	long      = `{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"GpuClaimParameters","sharing":{"strategy":"TimeSlicing","timeSlicing":{"interval":"Long"}}}`
	medium    = "apiVersion: resource.gpudra.io/v1alpha1\nkind: GpuClaimParameters\nsharing:\n  strategy: TimeSlicing\n  timeSlicing:\n    interval: Medium\n"
)

// sliced returns the effective config for time slicing with interval i.
func sliced(i v1alpha1.TimeSliceInterval) *v1alpha1.GpuClaimParameters {
	p := v1alpha1.DefaultGpuClaimParameters()
	p.Sharing = &v1alpha1.GpuSharing{
		Strategy:    v1alpha1.TimeSlicingStrategy,
		TimeSlicing: &v1alpha1.TimeSlicingConfig{Interval: i},
	}
	return p
}

func TestResolve(t *testing.T) {
	def := v1alpha1.DefaultGpuClaimParameters()
	type want struct {
		device string
		config *v1alpha1.GpuClaimParameters
	}
	tests := []struct {
		name  string
		claim *resourceapi.ResourceClaim
		want  []want
	}{
		{
			name:  "no config gives defaults",
			claim: newClaim([]resourceapi.DeviceRequestAllocationResult{gpu("gpu", "gpu-0"), gpu("gpu", "gpu-1")}),
			want:  []want{{"gpu-0", def}, {"gpu-1", def}},
		},
		{
			name:  "class config only",
			claim: newClaim([]resourceapi.DeviceRequestAllocationResult{gpu("gpu", "gpu-0")}, fromClass(long)),
			want:  []want{{"gpu-0", sliced(v1alpha1.LongTimeSlice)}},
		},
		{
			name: "claim overrides class, whatever the list order",
			claim: newClaim([]resourceapi.DeviceRequestAllocationResult{gpu("gpu", "gpu-0")},
				fromClaim(short), fromClass(long)),
			want: []want{{"gpu-0", sliced(v1alpha1.ShortTimeSlice)}},
		},
		{
			name: "global claim config overrides request-scoped class config",
			claim: newClaim([]resourceapi.DeviceRequestAllocationResult{gpu("gpu", "gpu-0")},
				fromClass(long, "gpu"), fromClaim(exclusive)),
			want: []want{{"gpu-0", def}},
		},
		{
			name: "request-scoped and global configs",
			claim: newClaim([]resourceapi.DeviceRequestAllocationResult{
				gpu("train", "gpu-0"), gpu("infer", "gpu-1"), gpu("other", "gpu-2")},
				fromClaim(long), fromClaim(short, "infer"), fromClaim(medium, "other", "missing")),
			want: []want{
				{"gpu-0", sliced(v1alpha1.LongTimeSlice)},
				{"gpu-1", sliced(v1alpha1.ShortTimeSlice)},
				{"gpu-2", sliced(v1alpha1.MediumTimeSlice)},
			},
		},
		{
			name: "config for a main request applies to its subrequests",
			claim: newClaim([]resourceapi.DeviceRequestAllocationResult{
				gpu("gpu/h100", "gpu-0"), gpu("gpus/h100", "gpu-1")},
				fromClaim(long, "gpu")),
			want: []want{{"gpu-0", sliced(v1alpha1.LongTimeSlice)}, {"gpu-1", def}},
		},
		{
			name: "config for a subrequest applies to that subrequest only",
			claim: newClaim([]resourceapi.DeviceRequestAllocationResult{
				gpu("gpu/h100", "gpu-0"), gpu("gpu/a100", "gpu-1"), gpu("gpu", "gpu-2")},
				fromClaim(long, "gpu/h100")),
			want: []want{{"gpu-0", sliced(v1alpha1.LongTimeSlice)}, {"gpu-1", def}, {"gpu-2", def}},
		},
		{
			name: "subrequest config after main request config wins",
			claim: newClaim([]resourceapi.DeviceRequestAllocationResult{
				gpu("gpu/h100", "gpu-0"), gpu("gpu/a100", "gpu-1")},
				fromClaim(long, "gpu"), fromClaim(short, "gpu/a100")),
			want: []want{{"gpu-0", sliced(v1alpha1.LongTimeSlice)}, {"gpu-1", sliced(v1alpha1.ShortTimeSlice)}},
		},
		{
			name: "foreign driver configs are ignored, even invalid ones",
			claim: newClaim([]resourceapi.DeviceRequestAllocationResult{gpu("gpu", "gpu-0")},
				fromClaim(short),
				config(resourceapi.AllocationConfigSourceClaim, "nic.example.com", `{"mtu": 9000}`),
				config(resourceapi.AllocationConfigSourceClass, "other.example.com", `not even json`)),
			want: []want{{"gpu-0", sliced(v1alpha1.ShortTimeSlice)}},
		},
		{
			name: "results of other pools and drivers are skipped, order is kept",
			claim: newClaim([]resourceapi.DeviceRequestAllocationResult{
				gpu("gpu", "gpu-3"),
				result("gpu", driver, "node-b", "gpu-0"),
				result("nic", "nic.example.com", pool, "eth0"),
				gpu("gpu", "gpu-1"),
			}, fromClass(medium)),
			want: []want{{"gpu-3", sliced(v1alpha1.MediumTimeSlice)}, {"gpu-1", sliced(v1alpha1.MediumTimeSlice)}},
		},
		{
			name: "later config of the same source wins",
			claim: newClaim([]resourceapi.DeviceRequestAllocationResult{gpu("gpu", "gpu-0"), gpu("x", "gpu-1")},
				fromClass(long), fromClass(short, "gpu"), fromClaim(long, "gpu"), fromClaim(medium)),
			want: []want{{"gpu-0", sliced(v1alpha1.MediumTimeSlice)}, {"gpu-1", sliced(v1alpha1.MediumTimeSlice)}},
		},
		{
			name: "later request-scoped config of the same source wins",
			claim: newClaim([]resourceapi.DeviceRequestAllocationResult{gpu("gpu", "gpu-0"), gpu("x", "gpu-1")},
				fromClaim(medium), fromClaim(long, "gpu")),
			want: []want{{"gpu-0", sliced(v1alpha1.LongTimeSlice)}, {"gpu-1", sliced(v1alpha1.MediumTimeSlice)}},
		},
		{
			name:  "nothing of ours on this node",
			claim: newClaim([]resourceapi.DeviceRequestAllocationResult{result("gpu", driver, "node-b", "gpu-0")}),
			want:  nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Resolve(tt.claim, native, pool)
			require.NoError(t, err)
			require.Len(t, got, len(tt.want))
			for i, w := range tt.want {
				assert.Equal(t, w.device, got[i].Result.Device, "device %d", i)
				assert.Equal(t, w.config, got[i].Config, "config of %s", w.device)
			}
		})
	}
}

func TestResolveInvalidConfig(t *testing.T) {
	tests := []struct {
		name   string
		config resourceapi.DeviceAllocationConfiguration
		want   string
	}{
		{
			name:   "invalid value in a claim config",
			config: fromClaim(`{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"GpuClaimParameters","sharing":{"strategy":"MPSX"}}`, "train"),
			want: `ResourceClaim ml/train-gpus: opaque parameters in status.allocation.devices.config[1] ` +
				`(source FromClaim, applies to request "train"): invalid GpuClaimParameters: sharing.strategy: ` +
				`Unsupported value: "MPSX": supported values: "Exclusive", "TimeSlicing", "MPS"`,
		},
		{
			name:   "unknown field in a class config",
			config: fromClass(`{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"GpuClaimParameters","sharing":{"stratgy":"TimeSlicing"}}`, "train", "infer/small"),
			want: `ResourceClaim ml/train-gpus: opaque parameters in status.allocation.devices.config[1] ` +
				`(source FromClass, applies to requests "train", "infer/small"): invalid GpuClaimParameters: ` +
				`strict decoding error: unknown field "sharing.stratgy"`,
		},
		{
			name:   "wrong kind in a global config",
			config: fromClaim(`{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"GpuParameters"}`),
			want: `ResourceClaim ml/train-gpus: opaque parameters in status.allocation.devices.config[1] ` +
				`(source FromClaim, applies to all requests): invalid GpuClaimParameters: kind: ` +
				`Unsupported value: "GpuParameters": supported values: "GpuClaimParameters"`,
		},
		{
			name:   "missing parameters",
			config: fromClaim(""),
			want: `ResourceClaim ml/train-gpus: opaque parameters in status.allocation.devices.config[1] ` +
				`(source FromClaim, applies to all requests): invalid GpuClaimParameters: parameters are empty; ` +
				`expected an object with apiVersion "resource.gpudra.io/v1alpha1" and kind "GpuClaimParameters"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The invalid config comes after a valid one and is invalid even
			// though no device of this node uses it.
			c := newClaim([]resourceapi.DeviceRequestAllocationResult{gpu("other", "gpu-0")}, fromClaim(short), tt.config)
			got, err := Resolve(c, native, pool)
			require.Error(t, err)
			assert.Nil(t, got)
			assert.Equal(t, tt.want, err.Error())
			var de *v1alpha1.DecodeError
			assert.ErrorAs(t, err, &de)
		})
	}
}

func TestResolveErrors(t *testing.T) {
	_, err := Resolve(nil, native, pool)
	assert.EqualError(t, err, "no ResourceClaim given")

	unallocated := newClaim(nil)
	unallocated.Status.Allocation = nil
	_, err = Resolve(unallocated, native, pool)
	assert.EqualError(t, err, "ResourceClaim ml/train-gpus is not allocated (status.allocation is empty)")

	badSource := newClaim([]resourceapi.DeviceRequestAllocationResult{gpu("gpu", "gpu-0")},
		config("FromSomewhere", driver, short))
	_, err = Resolve(badSource, native, pool)
	assert.EqualError(t, err, `ResourceClaim ml/train-gpus: status.allocation.devices.config[0] has unknown `+
		`source "FromSomewhere", expected "FromClass" or "FromClaim"`)
	var de *v1alpha1.DecodeError
	assert.False(t, errors.As(err, &de))
}

func TestResolveParametersObject(t *testing.T) {
	cfg := fromClaim("")
	cfg.Opaque.Parameters = runtime.RawExtension{Object: sliced(v1alpha1.LongTimeSlice)}
	got, err := Resolve(newClaim([]resourceapi.DeviceRequestAllocationResult{gpu("gpu", "gpu-0")}, cfg), native, pool)
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, sliced(v1alpha1.LongTimeSlice), got[0].Config)
}

func TestResolveReturnsCopies(t *testing.T) {
	share := types.UID("share-1")
	r := gpu("gpu", "gpu-0")
	r.ShareID = &share
	c := newClaim([]resourceapi.DeviceRequestAllocationResult{r, gpu("gpu", "gpu-1")}, fromClaim(long))

	got, err := Resolve(c, native, pool)
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, r, got[0].Result)

	got[0].Config.Sharing.TimeSlicing.Interval = v1alpha1.ShortTimeSlice
	*got[0].Result.ShareID = "changed"
	assert.Equal(t, v1alpha1.LongTimeSlice, got[1].Config.Sharing.TimeSlicing.Interval)
	assert.Equal(t, types.UID("share-1"), *c.Status.Allocation.Devices.Results[0].ShareID)

	again, err := Resolve(c, native, pool)
	require.NoError(t, err)
	assert.Equal(t, v1alpha1.LongTimeSlice, again[0].Config.Sharing.TimeSlicing.Interval)
}
