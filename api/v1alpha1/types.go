package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GpuClaimParameters configures how the GPUs allocated for a claim (or for
// some of its requests) are set up.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
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
	// MPSStrategy shares the GPU through the CUDA Multi-Process Service: the
	// plugin runs an MPS control daemon for the claim and points the
	// containers at it (see MpsConfig).
	MPSStrategy GpuSharingStrategy = "MPS"
)

// SupportedStrategies lists the strategies this version accepts.
var SupportedStrategies = []GpuSharingStrategy{ExclusiveStrategy, TimeSlicingStrategy, MPSStrategy}

// GpuSharing describes how a GPU is shared. Each strategy that takes settings
// has its own optional sub-struct, which may only be set together with that
// strategy.
type GpuSharing struct {
	// Strategy is one of Exclusive (default), TimeSlicing or MPS.
	Strategy GpuSharingStrategy `json:"strategy"`

	// TimeSlicing holds the settings of the TimeSlicing strategy. It may only
	// be set when Strategy is TimeSlicing.
	TimeSlicing *TimeSlicingConfig `json:"timeSlicing,omitempty"`

	// MPS holds the settings of the MPS strategy. It may only be set when
	// Strategy is MPS.
	MPS *MpsConfig `json:"mps,omitempty"`
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

// IsMPS reports whether the GPU is shared through MPS.
func (s *GpuSharing) IsMPS() bool {
	return s != nil && s.Strategy == MPSStrategy
}

// MpsConfig holds the settings of the MPS strategy. Every field is optional;
// unset fields leave the MPS defaults (all threads, no memory limit). On a
// consumable share the pinned-memory limit defaults to the share's memory and
// may not exceed it.
type MpsConfig struct {
	// DefaultActiveThreadPercentage limits the share of the GPU's
	// multiprocessors each MPS client may use, 1 to 100.
	DefaultActiveThreadPercentage *int32 `json:"defaultActiveThreadPercentage,omitempty"`
	// DefaultPinnedDeviceMemoryLimit limits the device memory each MPS client
	// may pin, on every GPU of the claim (at least 1Mi).
	DefaultPinnedDeviceMemoryLimit *resource.Quantity `json:"defaultPinnedDeviceMemoryLimit,omitempty"`
	// PerDevicePinnedMemoryLimits overrides the default limit per GPU. Keys
	// are CUDA device ordinals as the container sees them ("0" is the first
	// GPU allocated for the request) or a device's UUID (GPU-… or MIG-…),
	// which must be one of the request's devices when the claim is prepared.
	PerDevicePinnedMemoryLimits map[string]resource.Quantity `json:"perDevicePinnedMemoryLimits,omitempty"`
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
