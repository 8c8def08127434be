package v1alpha1

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/validation/field"
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
				`sharing.strategy: Unsupported value: "Shared": supported values: "Exclusive", "TimeSlicing"`}},
		},
		{
			name: "missing strategy",
			in:   sharing(GpuSharing{}),
			want: []wantErr{{field.ErrorTypeRequired, "sharing.strategy",
				`sharing.strategy: Required value: supported values: "Exclusive", "TimeSlicing"`}},
		},
		{
			name: "MPS is not supported yet",
			in:   sharing(GpuSharing{Strategy: MPSStrategy}),
			want: []wantErr{{field.ErrorTypeInvalid, "sharing.strategy",
				`sharing.strategy: Invalid value: "MPS": MPS sharing is not supported yet by ` +
					`resource.gpudra.io/v1alpha1 GpuClaimParameters; supported values: "Exclusive", "TimeSlicing"`}},
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
