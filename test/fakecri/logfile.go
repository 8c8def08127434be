package fakecri

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The CRI container log format that the kubelet reads for `kubectl logs`:
// "<RFC3339Nano time> <stream> <tag> <text>", where tag F marks a full line
// and P a partial one.
const (
	streamStdout = "stdout"
	tagFull      = "F"
	// logTimeFormat is RFC 3339 with fixed-width nanoseconds, so that
	// records sort as text.
	logTimeFormat = "2006-01-02T15:04:05.000000000Z07:00"
)

// LogLines returns the text the container "prints" (without CRI framing):
//
//	container=<name> pod=<namespace>/<pod>
//	cdi-devices: <comma-separated IDs or "none">
//	NVIDIA_VISIBLE_DEVICES=<value, or "unset">
//	GPU <i>: <product> (UUID: <uuid>)      one per visible GPU, by minor
//	device-nodes: <comma-separated paths or "none">
//	env GPUDRA_<...>=<value>               every GPUDRA_* and CUDA_MPS_* variable, by name
//	mount <destination> <- <source>        every MPS directory mount (destination
//	                                       containing "nvidia-mps"), in spec order
func (i Injection) LogLines() []string {
	lines := []string{
		fmt.Sprintf("container=%s pod=%s", i.Container, i.Pod),
		"cdi-devices: " + joinOr(i.CDIDevices, "none"),
	}
	if v, ok := i.Getenv("NVIDIA_VISIBLE_DEVICES"); ok {
		lines = append(lines, "NVIDIA_VISIBLE_DEVICES="+v)
	} else {
		lines = append(lines, "NVIDIA_VISIBLE_DEVICES=unset")
	}
	for _, g := range i.GPUs {
		uuid := g.UUID
		if uuid == "" {
			uuid = "unknown"
		}
		lines = append(lines, fmt.Sprintf("GPU %d: %s (UUID: %s)", g.Index, g.ProductName, uuid))
	}
	lines = append(lines, "device-nodes: "+joinOr(sortedNodePaths(i.DeviceNodes), "none"))
	var gpudraEnv []string
	for _, kv := range i.Env {
		if strings.HasPrefix(kv, "GPUDRA_") || strings.HasPrefix(kv, "CUDA_MPS_") {
			gpudraEnv = append(gpudraEnv, kv)
		}
	}
	sort.SliceStable(gpudraEnv, func(a, b int) bool { return envKey(gpudraEnv[a]) < envKey(gpudraEnv[b]) })
	for _, kv := range gpudraEnv {
		lines = append(lines, "env "+kv)
	}
	for _, m := range i.Mounts {
		if strings.Contains(m.Destination, "nvidia-mps") {
			lines = append(lines, "mount "+m.Destination+" <- "+m.Source)
		}
	}
	return lines
}

// sortedNodePaths puts GPU nodes (/dev/nvidia<N>) first, by minor, then the
// other nodes by path.
func sortedNodePaths(nodes []DeviceNode) []string {
	type entry struct {
		path  string
		gpu   bool
		minor int
	}
	entries := make([]entry, 0, len(nodes))
	for _, d := range nodes {
		e := entry{path: d.Path}
		if m := gpuNodeRE.FindStringSubmatch(d.Path); m != nil {
			if minor, err := strconv.Atoi(m[1]); err == nil {
				e.gpu, e.minor = true, minor
			}
		}
		entries = append(entries, e)
	}
	sort.Slice(entries, func(a, b int) bool {
		ea, eb := entries[a], entries[b]
		switch {
		case ea.gpu != eb.gpu:
			return ea.gpu
		case ea.gpu:
			return ea.minor < eb.minor
		default:
			return ea.path < eb.path
		}
	})
	paths := make([]string, len(entries))
	for n, e := range entries {
		paths[n] = e.path
	}
	return paths
}

func envKey(kv string) string {
	k, _, _ := strings.Cut(kv, "=")
	return k
}

func joinOr(items []string, empty string) string {
	if len(items) == 0 {
		return empty
	}
	return strings.Join(items, ",")
}

// writeContainerLog appends the lines to the CRI log file at path, creating
// it and its directory if needed.
func writeContainerLog(path string, lines []string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create container log directory: %w", err)
	}
	var buf bytes.Buffer
	for _, line := range lines {
		// One CRI log record per line: newlines inside would split it.
		line = strings.NewReplacer("\r", `\r`, "\n", `\n`).Replace(line)
		fmt.Fprintf(&buf, "%s %s %s %s\n", time.Now().UTC().Format(logTimeFormat), streamStdout, tagFull, line)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("open container log: %w", err)
	}
	if _, err := f.Write(buf.Bytes()); err != nil {
		_ = f.Close()
		return fmt.Errorf("write container log %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close container log %s: %w", path, err)
	}
	return nil
}

// LogRecord is one parsed line of a CRI container log.
type LogRecord struct {
	Time   time.Time
	Stream string
	// Partial is true for tag "P" (the line continues in the next record).
	Partial bool
	Text    string
}

// ParseLogLine parses one line of a CRI container log file.
func ParseLogLine(line string) (LogRecord, error) {
	line = strings.TrimSuffix(line, "\n")
	fields := strings.SplitN(line, " ", 4)
	if len(fields) < 3 {
		return LogRecord{}, fmt.Errorf("CRI log line %q: want \"<time> <stream> <tag> <text>\"", line)
	}
	ts, err := time.Parse(time.RFC3339Nano, fields[0])
	if err != nil {
		return LogRecord{}, fmt.Errorf("CRI log line %q: timestamp: %w", line, err)
	}
	if fields[1] != "stdout" && fields[1] != "stderr" {
		return LogRecord{}, fmt.Errorf("CRI log line %q: unknown stream %q", line, fields[1])
	}
	tag := strings.Split(fields[2], ":")[0]
	if tag != "F" && tag != "P" {
		return LogRecord{}, fmt.Errorf("CRI log line %q: unknown tag %q", line, fields[2])
	}
	rec := LogRecord{Time: ts, Stream: fields[1], Partial: tag == "P"}
	if len(fields) == 4 {
		rec.Text = fields[3]
	}
	return rec, nil
}
