package v1alpha1

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
)

func TestValidate(t *testing.T) {
	type wantErr struct {
		typ   field.ErrorType
		field string
		msg   string // exact message of the field error
	}
	sharing := func(s GpuSharing) *GpuClaimParameters { return &GpuClaimParameters{Sharing: &s} }
	tests := []struct {
		name string
		in   *GpuClaimParameters
		want []wantErr
	}{
		{name: "nil object", in: nil},
		{name: "no sharing", in: &GpuClaimParameters{}},
		{name: "exclusive", in: sharing(GpuSharing{Strategy: ExclusiveStrategy})},
		{name: "time slicing", in: sharing(GpuSharing{
			Strategy: TimeSlicingStrategy, TimeSlicing: &TimeSlicingConfig{Interval: ShortTimeSlice}})},
		{name: "time slicing without settings", in: sharing(GpuSharing{Strategy: TimeSlicingStrategy})},
		{
			name: "unknown strategy",
			in:   sharing(GpuSharing{Strategy: "Shared"}),
			want: []wantErr{{field.ErrorTypeNotSupported, "sharing.strategy",
				`sharing.strategy: Unsupported value: "Shared": supported values: "Exclusive", "TimeSlicing", "MPS"`}},
		},
		{
			name: "missing strategy",
			in:   sharing(GpuSharing{}),
			want: []wantErr{{field.ErrorTypeRequired, "sharing.strategy",
				`sharing.strategy: Required value: supported values: "Exclusive", "TimeSlicing", "MPS"`}},
		},
		{
			name: "MPS without settings",
			in:   sharing(GpuSharing{Strategy: MPSStrategy}),
		},
		{
			name: "MPS with every setting",
			in: sharing(GpuSharing{Strategy: MPSStrategy, MPS: &MpsConfig{
				DefaultActiveThreadPercentage:  ptr.To[int32](100),
				DefaultPinnedDeviceMemoryLimit: ptr.To(resource.MustParse("1Mi")),
				PerDevicePinnedMemoryLimits:    map[string]resource.Quantity{"0": resource.MustParse("10Gi"), "7": resource.MustParse("1Gi")},
			}}),
		},
		{
			name: "MPS thread percentage above 100",
			in:   sharing(GpuSharing{Strategy: MPSStrategy, MPS: &MpsConfig{DefaultActiveThreadPercentage: ptr.To[int32](101)}}),
			want: []wantErr{{field.ErrorTypeInvalid, "sharing.mps.defaultActiveThreadPercentage",
				`sharing.mps.defaultActiveThreadPercentage: Invalid value: 101: must be between 1 and 100 (percent of the GPU's multiprocessors per client)`}},
		},
		{
			name: "MPS per-device keys may be device UUIDs",
			in: sharing(GpuSharing{Strategy: MPSStrategy, MPS: &MpsConfig{
				PerDevicePinnedMemoryLimits: map[string]resource.Quantity{
					"GPU-2f8d0a45-0e43-4b3a-9f52-1d3e5c7a9b10": resource.MustParse("1Gi"),
					"MIG-5c1e7f3a-9d2b-4e6f-8a0c-3b7d9e1f2a4c": resource.MustParse("1Gi")}}}),
		},
		{
			name: "MPS per-device key is neither an ordinal nor a UUID",
			in: sharing(GpuSharing{Strategy: MPSStrategy, MPS: &MpsConfig{
				PerDevicePinnedMemoryLimits: map[string]resource.Quantity{"gpu1": resource.MustParse("1Gi")}}}),
			want: []wantErr{{field.ErrorTypeInvalid, "sharing.mps.perDevicePinnedMemoryLimits[gpu1]", ""}},
		},
		{
			name: "MPS per-device limit below 1Mi",
			in: sharing(GpuSharing{Strategy: MPSStrategy, MPS: &MpsConfig{
				PerDevicePinnedMemoryLimits: map[string]resource.Quantity{"1": resource.MustParse("0")}}}),
			want: []wantErr{{field.ErrorTypeInvalid, "sharing.mps.perDevicePinnedMemoryLimits[1]",
				`sharing.mps.perDevicePinnedMemoryLimits[1]: Invalid value: "0": must be at least 1Mi (MPS limits are whole MiB)`}},
		},
		{
			name: "MPS default limit that overflows int64",
			in: sharing(GpuSharing{Strategy: MPSStrategy, MPS: &MpsConfig{
				DefaultPinnedDeviceMemoryLimit: ptr.To(resource.MustParse("9223372036854775808"))}}),
			want: []wantErr{{field.ErrorTypeInvalid, "sharing.mps.defaultPinnedDeviceMemoryLimit",
				`sharing.mps.defaultPinnedDeviceMemoryLimit: Invalid value: "9223372036854775808": must be at most 1Pi (no GPU has more memory)`}},
		},
		{
			name: "MPS per-device limit far above any GPU",
			in: sharing(GpuSharing{Strategy: MPSStrategy, MPS: &MpsConfig{
				PerDevicePinnedMemoryLimits: map[string]resource.Quantity{"0": resource.MustParse("1Ei")}}}),
			want: []wantErr{{field.ErrorTypeInvalid, "sharing.mps.perDevicePinnedMemoryLimits[0]",
				`sharing.mps.perDevicePinnedMemoryLimits[0]: Invalid value: "1Ei": must be at most 1Pi (no GPU has more memory)`}},
		},
		{
			name: "MPS limit at the upper bound",
			in: sharing(GpuSharing{Strategy: MPSStrategy, MPS: &MpsConfig{
				DefaultPinnedDeviceMemoryLimit: ptr.To(resource.MustParse("1Pi"))}}),
		},
		{
			name: "MPS settings with time slicing",
			in:   sharing(GpuSharing{Strategy: TimeSlicingStrategy, MPS: &MpsConfig{}}),
			want: []wantErr{{field.ErrorTypeInvalid, "sharing.mps", ""}},
		},
		{
			name: "time slicing settings with exclusive strategy",
			in: sharing(GpuSharing{
				Strategy: ExclusiveStrategy, TimeSlicing: &TimeSlicingConfig{Interval: LongTimeSlice}}),
			want: []wantErr{{field.ErrorTypeInvalid, "sharing.timeSlicing",
				`sharing.timeSlicing: Invalid value: {"interval":"Long"}: ` +
					`timeSlicing may only be set when strategy is TimeSlicing`}},
		},
		{
			name: "unknown interval",
			in: sharing(GpuSharing{
				Strategy: TimeSlicingStrategy, TimeSlicing: &TimeSlicingConfig{Interval: "VeryLong"}}),
			want: []wantErr{{field.ErrorTypeNotSupported, "sharing.timeSlicing.interval",
				`sharing.timeSlicing.interval: Unsupported value: "VeryLong": ` +
					`supported values: "Default", "Short", "Medium", "Long"`}},
		},
		{
			name: "missing interval",
			in: sharing(GpuSharing{
				Strategy: TimeSlicingStrategy, TimeSlicing: &TimeSlicingConfig{}}),
			want: []wantErr{{field.ErrorTypeRequired, "sharing.timeSlicing.interval",
				`sharing.timeSlicing.interval: Required value: supported values: "Default", "Short", "Medium", "Long"`}},
		},
		{
			name: "every problem is reported",
			in: sharing(GpuSharing{
				Strategy: "Shared", TimeSlicing: &TimeSlicingConfig{Interval: "VeryLong"}}),
			want: []wantErr{
				{typ: field.ErrorTypeNotSupported, field: "sharing.strategy"},
				{typ: field.ErrorTypeInvalid, field: "sharing.timeSlicing"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := Validate(tt.in)
			require.Len(t, errs, len(tt.want), "errors: %v", errs)
			for i, w := range tt.want {
				assert.Equal(t, w.typ, errs[i].Type)
				assert.Equal(t, w.field, errs[i].Field)
				if w.msg != "" {
					assert.Equal(t, w.msg, errs[i].Error())
				}
			}
		})
	}
}
