// Package procmem reads a process's memory from /proc, in MiB: what the
// benchmarks and the GPU verification kit report about the plugin and about
// what an NVML library adds to a process.
package procmem

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

const kiB = 1024.0

// Status reads a memory field of /proc/<pid>/status (VmRSS: resident now,
// VmHWM: peak resident, RssAnon, RssFile, ...).
func Status(pid int, field string) (float64, error) {
	path := fmt.Sprintf("/proc/%d/status", pid)
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			return parseKiB(path, rest)
		}
	}
	return 0, fmt.Errorf("no %s in %s", field, path)
}

// SmapsRollup reads /proc/<pid>/smaps_rollup by field (Rss, Pss,
// Pss_Anon, Pss_File, ...).
func SmapsRollup(pid int) (map[string]float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(data), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasSuffix(rest, " kB") {
			continue
		}
		if v, err := parseKiB("", rest); err == nil {
			out[name] = v
		}
	}
	return out, nil
}

// Mapped is the resident memory (Rss) of the process's mappings of files
// whose base name contains name, from /proc/<pid>/smaps.
func Mapped(pid int, name string) (float64, error) {
	path := fmt.Sprintf("/proc/%d/smaps", pid)
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var mib float64
	in := false
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			// A mapping's header: address range, perms, offset, device, inode[, path].
			in = len(fields) >= 6 && strings.Contains(filepath.Base(fields[5]), name)
			continue
		}
		if in && len(fields) == 3 && fields[0] == "Rss:" {
			v, err := parseKiB(path, fields[1])
			if err != nil {
				return 0, err
			}
			mib += v
		}
	}
	return mib, nil
}

// parseKiB parses "  1234 kB" (or "1234") into MiB.
func parseKiB(path, s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), "kB")), 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v / kiB, nil
}
