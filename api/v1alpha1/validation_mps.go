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
		errs = append(errs, validateLimit(*q, path.Child("defaultPinnedDeviceMemoryLimit"))...)
	}
	perDevice := path.Child("perDevicePinnedMemoryLimits")
	for k, q := range c.PerDevicePinnedMemoryLimits {
		if _, err := ParseDeviceOrdinal(k); err != nil {
			errs = append(errs, field.Invalid(perDevice.Key(k), k, err.Error()))
			continue
		}
		errs = append(errs, validateLimit(q, perDevice.Key(k))...)
	}
	return errs
}

func validateLimit(q resource.Quantity, path *field.Path) field.ErrorList {
	if q.CmpInt64(MinPinnedMemoryLimit) < 0 {
		return field.ErrorList{field.Invalid(path, q.String(), "must be at least 1Mi (MPS limits are whole MiB)")}
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
