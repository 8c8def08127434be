package health

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
)

// DefaultIgnoredXIDs are XIDs caused by the application, not the GPU: a
// faulting kernel (13), a bad memory access (31), a GPU that stopped
// processing because the application hung (43), a cleanup after a killed
// process (45), a video decoder exception (68) and a context switch timeout
// (109). The GPU stays healthy when one of them is reported.
var DefaultIgnoredXIDs = []uint64{13, 31, 43, 45, 68, 109}

// fatalXIDs leave the GPU unusable until it is reset: workloads on it are
// evicted (NoExecute).
var fatalXIDs = map[uint64]string{
	48:  "double-bit ECC error",
	62:  "internal micro-controller halt",
	64:  "ECC page retirement or row remapping failure",
	79:  "GPU has fallen off the bus",
	95:  "uncontained ECC error",
	119: "GSP RPC timeout",
	120: "GSP error",
	140: "unrecovered ECC error",
}

// degradedXIDs do not stop the GPU but make it a poor choice for new work
// (NoSchedule).
var degradedXIDs = map[uint64]string{
	63: "ECC page retirement or row remapping event",
	74: "NVLink error",
	92: "high single-bit ECC error rate",
	94: "contained ECC error",
}

// classifyXID returns the taint effect and a description of an XID that is
// not ignored. XIDs in neither table count as degraded: unknown errors keep
// running work but get no new work until they expire.
func classifyXID(xid uint64) (resourceapi.DeviceTaintEffect, string) {
	if d, ok := fatalXIDs[xid]; ok {
		return resourceapi.DeviceTaintEffectNoExecute, d
	}
	if d, ok := degradedXIDs[xid]; ok {
		return resourceapi.DeviceTaintEffectNoSchedule, d
	}
	return resourceapi.DeviceTaintEffectNoSchedule, "critical XID"
}

// ParseXIDs parses a comma-separated XID list such as "13,31,43".
func ParseXIDs(s string) ([]uint64, error) {
	var out []uint64
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		x, err := strconv.ParseUint(f, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("XID %q is not a number", f)
		}
		out = append(out, x)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// FormatXIDs is the inverse of ParseXIDs.
func FormatXIDs(xids []uint64) string {
	parts := make([]string, len(xids))
	for i, x := range xids {
		parts[i] = strconv.FormatUint(x, 10)
	}
	return strings.Join(parts, ",")
}
