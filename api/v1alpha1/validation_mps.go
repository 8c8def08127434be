package v1alpha1

import (
	"fmt"
	"regexp"
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
		if _, _, err := ParseDeviceKey(k); err != nil {
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

// deviceUUID matches a device's UUID as NVML reports it: GPU-<uuid> for a
// GPU, MIG-<uuid> (or the older MIG-GPU-<uuid>/<gi>/<ci>) for a MIG device.
var deviceUUID = regexp.MustCompile(`^(GPU|MIG)-[0-9A-Za-z/-]{1,100}$`)

// ParseDeviceKey parses a key of perDevicePinnedMemoryLimits: a CUDA device
// ordinal (returned as ordinal, uuid "") or a device's UUID (returned as
// uuid). Whether the UUID is one of the request's devices is known only
// when the claim is prepared.
func ParseDeviceKey(key string) (ordinal int, uuid string, err error) {
	if deviceUUID.MatchString(key) {
		return 0, key, nil
	}
	n, err := ParseDeviceOrdinal(key)
	if err != nil {
		return 0, "", fmt.Errorf("must be a CUDA device ordinal between 0 and %d, as the container sees its GPUs, "+
			"or the UUID of one of the request's devices (GPU-… or MIG-…)", MaxMPSDeviceOrdinal)
	}
	return n, "", nil
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
