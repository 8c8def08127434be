package v1alpha1

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSetDefaults(t *testing.T) {
	tests := []struct {
		name string
		in   *GpuClaimParameters
		want *GpuClaimParameters
	}{
		{
			name: "no sharing means exclusive",
			in:   &GpuClaimParameters{},
			want: &GpuClaimParameters{Sharing: &GpuSharing{Strategy: ExclusiveStrategy}},
		},
		{
			name: "empty strategy means exclusive",
			in:   &GpuClaimParameters{Sharing: &GpuSharing{}},
			want: &GpuClaimParameters{Sharing: &GpuSharing{Strategy: ExclusiveStrategy}},
		},
		{
			name: "time slicing without settings gets the default interval",
			in:   &GpuClaimParameters{Sharing: &GpuSharing{Strategy: TimeSlicingStrategy}},
			want: &GpuClaimParameters{Sharing: &GpuSharing{
				Strategy:    TimeSlicingStrategy,
				TimeSlicing: &TimeSlicingConfig{Interval: DefaultTimeSlice},
			}},
		},
		{
			name: "time slicing with an empty interval gets the default interval",
			in: &GpuClaimParameters{Sharing: &GpuSharing{
				Strategy:    TimeSlicingStrategy,
				TimeSlicing: &TimeSlicingConfig{},
			}},
			want: &GpuClaimParameters{Sharing: &GpuSharing{
				Strategy:    TimeSlicingStrategy,
				TimeSlicing: &TimeSlicingConfig{Interval: DefaultTimeSlice},
			}},
		},
		{
			name: "set interval is kept",
			in: &GpuClaimParameters{Sharing: &GpuSharing{
				Strategy:    TimeSlicingStrategy,
				TimeSlicing: &TimeSlicingConfig{Interval: LongTimeSlice},
			}},
			want: &GpuClaimParameters{Sharing: &GpuSharing{
				Strategy:    TimeSlicingStrategy,
				TimeSlicing: &TimeSlicingConfig{Interval: LongTimeSlice},
			}},
		},
		{
			name: "settings of another strategy are left for validation",
			in: &GpuClaimParameters{Sharing: &GpuSharing{
				TimeSlicing: &TimeSlicingConfig{},
			}},
			want: &GpuClaimParameters{Sharing: &GpuSharing{
				Strategy:    ExclusiveStrategy,
				TimeSlicing: &TimeSlicingConfig{},
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			SetDefaults(tt.in)
			assert.Equal(t, tt.want, tt.in)
		})
	}
}

func TestSetDefaultsNil(t *testing.T) {
	assert.NotPanics(t, func() { SetDefaults(nil) })
}

func TestDefaultGpuClaimParameters(t *testing.T) {
	p := DefaultGpuClaimParameters()
	assert.Equal(t, APIVersion, p.APIVersion)
	assert.Equal(t, Kind, p.Kind)
	assert.True(t, p.Sharing.IsExclusive())
	assert.Equal(t, ExclusiveStrategy, p.Sharing.Strategy)
	assert.Empty(t, Validate(p))

	// Every call returns a fresh object.
	p.Sharing.Strategy = TimeSlicingStrategy
	assert.Equal(t, ExclusiveStrategy, DefaultGpuClaimParameters().Sharing.Strategy)
}

func TestSetDefaultsMPS(t *testing.T) {
	p := &GpuClaimParameters{Sharing: &GpuSharing{Strategy: MPSStrategy}}
	SetDefaults(p)
	if p.Sharing.MPS == nil || p.Sharing.MPS.DefaultActiveThreadPercentage != nil || p.Sharing.MPS.DefaultPinnedDeviceMemoryLimit != nil {
		t.Fatalf("MPS without settings must get an empty MpsConfig, got %+v", p.Sharing.MPS)
	}
	if p.Sharing.TimeSlicing != nil {
		t.Fatalf("MPS must not get time-slicing settings")
	}
}
