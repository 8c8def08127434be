package v1alpha1

import (
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

const (
	// MinPinnedMemoryLimit is the smallest pinned-memory limit accepted: MPS
	// takes limits in whole MiB.
	MinPinnedMemoryLimit = 1 << 20
	// MaxPinnedMemoryLimit is the largest limit accepted: far above the
	// memory of any GPU (prepare bounds a limit by its device's memory), and
	// low enough that every accepted quantity is an int64 of bytes (a plain
	// decimal of 2^63 or more would wrap negative in Quantity.Value).
	MaxPinnedMemoryLimit = 1 << 50
	// MaxMPSDeviceOrdinal bounds the keys of perDevicePinnedMemoryLimits; a
	// claim never gets more GPUs than a node has.
	MaxMPSDeviceOrdinal = 127
)

func validateMPS(c *MpsConfig, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if p := c.DefaultActiveThreadPercentage; p != nil && (*p < 1 || *p > 100) {
		errs = append(errs, field.Invalid(path.Child("defaultActiveThreadPercentage"), *p,
			"must be between 1 and 100 (percent of the GPU's multiprocessors per client)"))
	}
	if q := c.DefaultPinnedDeviceMemoryLimit; q != nil {
		errs = append(errs, ValidatePinnedMemoryLimit(*q, path.Child("defaultPinnedDeviceMemoryLimit"))...)
	}
	perDevice := path.Child("perDevicePinnedMemoryLimits")
	for k, q := range c.PerDevicePinnedMemoryLimits {
		if _, err := ParseDeviceOrdinal(k); err != nil {
			errs = append(errs, field.Invalid(perDevice.Key(k), k, err.Error()))
			continue
		}
		errs = append(errs, ValidatePinnedMemoryLimit(q, perDevice.Key(k))...)
	}
	return errs
}

// ValidatePinnedMemoryLimit checks an MPS pinned-memory limit against
// MinPinnedMemoryLimit and MaxPinnedMemoryLimit. The NVIDIA-format decoder
// (internal/shared/compat) uses it too.
func ValidatePinnedMemoryLimit(q resource.Quantity, path *field.Path) field.ErrorList {
	if q.CmpInt64(MinPinnedMemoryLimit) < 0 {
		return field.ErrorList{field.Invalid(path, q.String(), "must be at least 1Mi (MPS limits are whole MiB)")}
	}
	if q.CmpInt64(MaxPinnedMemoryLimit) > 0 {
		return field.ErrorList{field.Invalid(path, q.String(), fmt.Sprintf("must be at most %s (no GPU has more memory)",
			resource.NewQuantity(MaxPinnedMemoryLimit, resource.BinarySI)))}
	}
	return nil
}

// ParseDeviceOrdinal parses a key of perDevicePinnedMemoryLimits: a CUDA
// device ordinal "0" to "127" without sign or leading zeros.
func ParseDeviceOrdinal(key string) (int, error) {
	n, err := strconv.Atoi(key)
	if err != nil || n < 0 || n > MaxMPSDeviceOrdinal || strconv.Itoa(n) != key {
		return 0, fmt.Errorf("must be a CUDA device ordinal between 0 and %d, as the container sees its GPUs", MaxMPSDeviceOrdinal)
	}
	return n, nil
}
