package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
)

// DeepCopyInto copies the receiver into out. in must be non-nil.
func (in *GpuClaimParameters) DeepCopyInto(out *GpuClaimParameters) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	if in.Sharing != nil {
		out.Sharing = new(GpuSharing)
		in.Sharing.DeepCopyInto(out.Sharing)
	}
}

// DeepCopy returns an independent copy of the receiver, or nil for nil.
func (in *GpuClaimParameters) DeepCopy() *GpuClaimParameters {
	if in == nil {
		return nil
	}
	out := new(GpuClaimParameters)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *GpuClaimParameters) DeepCopyObject() runtime.Object {
	if c := in.DeepCopy(); c != nil {
		return c
	}
	return nil
}

// DeepCopyInto copies the receiver into out. in must be non-nil.
func (in *GpuSharing) DeepCopyInto(out *GpuSharing) {
	*out = *in
	if in.TimeSlicing != nil {
		out.TimeSlicing = in.TimeSlicing.DeepCopy()
	}
	if in.MPS != nil {
		out.MPS = in.MPS.DeepCopy()
	}
}

// DeepCopy returns an independent copy of the receiver, or nil for nil.
func (in *GpuSharing) DeepCopy() *GpuSharing {
	if in == nil {
		return nil
	}
	out := new(GpuSharing)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies the receiver into out. in must be non-nil.
func (in *TimeSlicingConfig) DeepCopyInto(out *TimeSlicingConfig) {
	*out = *in
}

// DeepCopy returns an independent copy of the receiver, or nil for nil.
func (in *TimeSlicingConfig) DeepCopy() *TimeSlicingConfig {
	if in == nil {
		return nil
	}
	out := new(TimeSlicingConfig)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies the receiver into out. in must be non-nil.
func (in *MpsConfig) DeepCopyInto(out *MpsConfig) {
	*out = *in
	if in.DefaultActiveThreadPercentage != nil {
		v := *in.DefaultActiveThreadPercentage
		out.DefaultActiveThreadPercentage = &v
	}
	if in.DefaultPinnedDeviceMemoryLimit != nil {
		v := in.DefaultPinnedDeviceMemoryLimit.DeepCopy()
		out.DefaultPinnedDeviceMemoryLimit = &v
	}
	if in.PerDevicePinnedMemoryLimits != nil {
		out.PerDevicePinnedMemoryLimits = make(map[string]resource.Quantity, len(in.PerDevicePinnedMemoryLimits))
		for k, v := range in.PerDevicePinnedMemoryLimits {
			out.PerDevicePinnedMemoryLimits[k] = v.DeepCopy()
		}
	}
}

// DeepCopy returns an independent copy of the receiver, or nil for nil.
func (in *MpsConfig) DeepCopy() *MpsConfig {
	if in == nil {
		return nil
	}
	out := new(MpsConfig)
	in.DeepCopyInto(out)
	return out
}
