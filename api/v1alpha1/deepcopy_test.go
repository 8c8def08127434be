package v1alpha1

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestDeepCopyIsIndependent(t *testing.T) {
	orig := &GpuClaimParameters{
		Sharing: &GpuSharing{
			Strategy:    TimeSlicingStrategy,
			TimeSlicing: &TimeSlicingConfig{Interval: LongTimeSlice},
		},
	}
	orig.APIVersion = APIVersion
	orig.Kind = Kind

	c := orig.DeepCopy()
	require.Equal(t, orig, c)

	c.Kind = "Other"
	c.Sharing.Strategy = ExclusiveStrategy
	c.Sharing.TimeSlicing.Interval = ShortTimeSlice
	c.Sharing.TimeSlicing = nil

	assert.Equal(t, Kind, orig.Kind)
	assert.Equal(t, TimeSlicingStrategy, orig.Sharing.Strategy)
	require.NotNil(t, orig.Sharing.TimeSlicing)
	assert.Equal(t, LongTimeSlice, orig.Sharing.TimeSlicing.Interval)
}

func TestDeepCopyNested(t *testing.T) {
	s := &GpuSharing{Strategy: TimeSlicingStrategy, TimeSlicing: &TimeSlicingConfig{Interval: MediumTimeSlice}}
	c := s.DeepCopy()
	c.TimeSlicing.Interval = DefaultTimeSlice
	assert.Equal(t, MediumTimeSlice, s.TimeSlicing.Interval)
	assert.NotSame(t, s.TimeSlicing, c.TimeSlicing)
}

func TestDeepCopyNil(t *testing.T) {
	var p *GpuClaimParameters
	assert.Nil(t, p.DeepCopy())
	assert.Nil(t, p.DeepCopyObject())
	var s *GpuSharing
	assert.Nil(t, s.DeepCopy())
	var ts *TimeSlicingConfig
	assert.Nil(t, ts.DeepCopy())
}

func TestDeepCopyObject(t *testing.T) {
	var obj runtime.Object = DefaultGpuClaimParameters()
	c := obj.DeepCopyObject()
	require.IsType(t, &GpuClaimParameters{}, c)
	assert.Equal(t, obj, c)
	assert.NotSame(t, obj, c)
	assert.Equal(t, SchemeGroupVersion.WithKind(Kind), c.GetObjectKind().GroupVersionKind())
}
