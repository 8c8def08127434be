package v1alpha1

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestTimeSliceIntervalInt(t *testing.T) {
	tests := []struct {
		interval TimeSliceInterval
		want     int
	}{
		{DefaultTimeSlice, 0},
		{ShortTimeSlice, 1},
		{MediumTimeSlice, 2},
		{LongTimeSlice, 3},
		{"", -1},
		{"long", -1},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.interval.Int(), "interval %q", tt.interval)
	}
}

func TestSharingHelpers(t *testing.T) {
	tests := []struct {
		name        string
		sharing     *GpuSharing
		exclusive   bool
		timeSlicing bool
	}{
		{name: "nil", sharing: nil, exclusive: true},
		{name: "empty strategy", sharing: &GpuSharing{}, exclusive: true},
		{name: "exclusive", sharing: &GpuSharing{Strategy: ExclusiveStrategy}, exclusive: true},
		{name: "time slicing", sharing: &GpuSharing{Strategy: TimeSlicingStrategy}, timeSlicing: true},
		{name: "mps", sharing: &GpuSharing{Strategy: MPSStrategy}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.exclusive, tt.sharing.IsExclusive())
			assert.Equal(t, tt.timeSlicing, tt.sharing.IsTimeSliced())
		})
	}
}
