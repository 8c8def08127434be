package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// GpuClaimParameters configures how the GPUs allocated for a claim (or for
// some of its requests) are set up.
type GpuClaimParameters struct {
	metav1.TypeMeta `json:",inline"`

	// Sharing selects whether and how the GPU may be shared between the
	// containers and pods that use the claim. Defaults to exclusive use.
	Sharing *GpuSharing `json:"sharing,omitempty"`
}

// GpuSharingStrategy names a way of sharing one GPU.
type GpuSharingStrategy string

const (
	// ExclusiveStrategy gives the consumers of the claim the GPU in the
	// default compute mode, without any time-slice tuning. This is the
	// default.
	ExclusiveStrategy GpuSharingStrategy = "Exclusive"
	// TimeSlicingStrategy lets the GPU be shared by time slicing and sets
	// the length of the slices (see TimeSlicingConfig).
	TimeSlicingStrategy GpuSharingStrategy = "TimeSlicing"
	// MPSStrategy is reserved for sharing through the CUDA Multi-Process
	// Service. It is not supported yet: validation rejects it.
	MPSStrategy GpuSharingStrategy = "MPS"
)

// SupportedStrategies lists the strategies this version accepts.
var SupportedStrategies = []GpuSharingStrategy{ExclusiveStrategy, TimeSlicingStrategy}

// GpuSharing describes how a GPU is shared. Each strategy that takes settings
// has its own optional sub-struct, which may only be set together with that
// strategy. Settings for MPS and MIG will be added as further sub-structs
// (mps, mig) in later versions.
type GpuSharing struct {
	// Strategy is one of Exclusive (default) or TimeSlicing.
	Strategy GpuSharingStrategy `json:"strategy"`

	// TimeSlicing holds the settings of the TimeSlicing strategy. It may only
	// be set when Strategy is TimeSlicing.
	TimeSlicing *TimeSlicingConfig `json:"timeSlicing,omitempty"`
}

// IsExclusive reports whether the GPU is used exclusively. A nil sharing
// means the default, which is exclusive use.
func (s *GpuSharing) IsExclusive() bool {
	return s == nil || s.Strategy == "" || s.Strategy == ExclusiveStrategy
}

// IsTimeSliced reports whether the GPU is shared by time slicing.
func (s *GpuSharing) IsTimeSliced() bool {
	return s != nil && s.Strategy == TimeSlicingStrategy
}

// TimeSlicingConfig holds the settings of the TimeSlicing strategy.
type TimeSlicingConfig struct {
	// Interval is the length of the time slice each process gets before
	// the GPU switches to another one: Default, Short, Medium or Long.
	Interval TimeSliceInterval `json:"interval"`
}

// TimeSliceInterval names one of the time-slice lengths the NVIDIA driver
// offers.
type TimeSliceInterval string

const (
	// DefaultTimeSlice keeps the driver's default time slice. This is the
	// default.
	DefaultTimeSlice TimeSliceInterval = "Default"
	// ShortTimeSlice selects the shortest time slice.
	ShortTimeSlice TimeSliceInterval = "Short"
	// MediumTimeSlice selects a medium time slice.
	MediumTimeSlice TimeSliceInterval = "Medium"
	// LongTimeSlice selects the longest time slice.
	LongTimeSlice TimeSliceInterval = "Long"
)

// SupportedIntervals lists the accepted time-slice intervals.
var SupportedIntervals = []TimeSliceInterval{DefaultTimeSlice, ShortTimeSlice, MediumTimeSlice, LongTimeSlice}

// Int returns the NVML time-slice level of the interval: 0 for Default, 1
// for Short, 2 for Medium and 3 for Long. It returns -1 for any other value;
// validated objects never hold one.
func (i TimeSliceInterval) Int() int {
	switch i {
	case DefaultTimeSlice:
		return 0
	case ShortTimeSlice:
		return 1
	case MediumTimeSlice:
		return 2
	case LongTimeSlice:
		return 3
	default:
		return -1
	}
}
