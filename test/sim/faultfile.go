package sim

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

// FaultFile is the control file through which a simulated node's GPUs are
// broken and repaired (the plugin watches it in simulated mode only). It
// lists the faults that are present, one per line:
//
//	gpu-3 xid 79        # XID 79: the GPU fell off the bus (lost, node reboot needed)
//	gpu-1 xid 13        # an application XID (on the default ignore list)
//	gpu-0 xid 94 gi 3   # an XID of GPU instance 3 (MIG); "gi 3 ci 0" names a compute instance too
//	gpu-0 ecc           # a double-bit ECC error
//	gpu-2 lost          # lost without any event (only the probe notices)
//	gpu-2 reset-required # every call answers ERROR_RESET_REQUIRED, no event
//	gpu-2 unbound       # handle lookups answer ERROR_NOT_FOUND, old handles ERROR_GPU_IS_LOST
//	gpu-1 thermal       # thermal throttling: hot, slow clocks (telemetry.go)
//
// A GPU is named gpu-<index> (its device name) or by UUID; '#' starts a
// comment. A line that appears is injected once. When the last line naming a
// GPU goes away, the GPU is reset (Server.Reset): emptying or deleting the
// file repairs every GPU.
type FaultFile struct {
	Path   string
	server *Server
	// active maps each applied line (normalized) to the GPU it names.
	active map[string]string
}

// Fault is one parsed line of a fault file.
type Fault struct {
	GPU  string // device name or UUID as written
	Kind string // "xid", "ecc", "lost", "reset-required", "unbound" or "thermal"
	XID  uint64
	// MIG: the GPU and compute instance of a MIG-scoped XID; nil for a
	// GPU-wide one.
	MIG *XIDScope
}

// XIDScope names the instances an XID is attributable to; CI is
// 0xFFFFFFFF when only the GPU instance is known.
type XIDScope struct {
	GI, CI uint32
}

func (f Fault) String() string {
	if f.Kind == "xid" {
		s := fmt.Sprintf("%s xid %d", f.GPU, f.XID)
		if f.MIG != nil {
			s += fmt.Sprintf(" gi %d", f.MIG.GI)
			if f.MIG.CI != noInstance {
				s += fmt.Sprintf(" ci %d", f.MIG.CI)
			}
		}
		return s
	}
	return f.GPU + " " + f.Kind
}

// NewFaultFile returns a control file for the server. Nothing is read yet.
func NewFaultFile(path string, s *Server) *FaultFile {
	return &FaultFile{Path: path, server: s, active: map[string]string{}}
}

// ParseFaults reads the lines of a fault file.
func ParseFaults(data string) ([]Fault, error) {
	var out []Fault
	sc := bufio.NewScanner(strings.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		f := Fault{GPU: fields[0]}
		switch {
		case (len(fields) == 3 || len(fields) == 5 || len(fields) == 7) && fields[1] == "xid":
			x, err := strconv.ParseUint(fields[2], 10, 32)
			if err != nil || x == 0 {
				return nil, fmt.Errorf("line %d: %q is not an XID number", n, fields[2])
			}
			f.Kind, f.XID = "xid", x
			if len(fields) > 3 {
				gi, ci, err := parseInstances(fields[3:])
				if err != nil {
					return nil, fmt.Errorf("line %d: %w", n, err)
				}
				f.MIG = &XIDScope{GI: gi, CI: ci}
			}
		case len(fields) == 2 && (fields[1] == "ecc" || fields[1] == "lost" || fields[1] == "thermal" ||
			fields[1] == "reset-required" || fields[1] == "unbound"):
			f.Kind = fields[1]
		default:
			return nil, fmt.Errorf("line %d: %q: want '<gpu> xid <n> [gi <id> [ci <id>]]', '<gpu> ecc', '<gpu> lost|reset-required|unbound' or '<gpu> thermal'", n, strings.TrimSpace(line))
		}
		out = append(out, f)
	}
	return out, sc.Err()
}

// parseInstances reads "gi <id>" and "gi <id> ci <id>" (or nothing).
func parseInstances(fields []string) (gi, ci uint32, err error) {
	gi, ci = noInstance, noInstance
	for i := 0; i+1 < len(fields); i += 2 {
		v, perr := strconv.ParseUint(fields[i+1], 10, 32)
		switch {
		case perr != nil || v >= noInstance:
			return 0, 0, fmt.Errorf("%q is not an instance ID", fields[i+1])
		case fields[i] == "gi" && i == 0:
			gi = uint32(v)
		case fields[i] == "ci" && i == 2:
			ci = uint32(v)
		default:
			return 0, 0, fmt.Errorf("want 'gi <id>' then optionally 'ci <id>', got %q", fields[i])
		}
	}
	return gi, ci, nil
}

// resolve maps gpu-<index> or a UUID to the GPU's UUID.
func (s *Server) resolve(name string) (string, error) {
	if idx, ok := strings.CutPrefix(name, "gpu-"); ok {
		if i, err := strconv.Atoi(idx); err == nil {
			for _, d := range s.devices {
				if d.gpu.Index == i {
					return d.uuid, nil
				}
			}
		}
	}
	if _, err := s.gpuByUUID(name); err != nil {
		return "", fmt.Errorf("%q is neither gpu-<index> nor the UUID of a GPU of this node", name)
	}
	return name, nil
}

// Sync applies the file: injects the lines that are new and resets the GPUs
// no line names any more. A missing file means no faults.
func (ff *FaultFile) Sync() error {
	data, err := os.ReadFile(ff.Path)
	if errors.Is(err, os.ErrNotExist) {
		data, err = nil, nil
	}
	if err != nil {
		return fmt.Errorf("read fault file: %w", err)
	}
	faults, err := ParseFaults(string(data))
	if err != nil {
		return fmt.Errorf("fault file %s: %w", ff.Path, err)
	}
	want := map[string]string{}
	named := map[string]bool{}
	for _, f := range faults {
		id, err := ff.server.resolve(f.GPU)
		if err != nil {
			return fmt.Errorf("fault file %s: %w", ff.Path, err)
		}
		key := id + " " + strings.TrimPrefix(f.String(), f.GPU+" ")
		want[key] = id
		named[id] = true
		if _, done := ff.active[key]; done {
			continue
		}
		switch f.Kind {
		case "xid":
			if f.MIG != nil {
				err = ff.server.InjectMIGXID(id, f.XID, f.MIG.GI, f.MIG.CI)
			} else {
				err = ff.server.InjectXID(id, f.XID)
			}
		case "ecc":
			err = ff.server.InjectDoubleBitECC(id)
		case "lost":
			err = ff.server.SetLost(id, true)
		case "reset-required":
			err = ff.server.SetResetRequired(id, true)
		case "unbound":
			err = ff.server.SetUnbound(id, true)
		case "thermal":
			err = ff.server.SetThermal(id, true)
		}
		if err != nil {
			return err
		}
	}
	for key, id := range ff.active {
		if _, still := want[key]; !still && !named[id] {
			if err := ff.server.Reset(id); err != nil {
				return err
			}
			named[id] = true // reset once
		}
	}
	ff.active = want
	return nil
}

// Watch syncs the file every interval until ctx is done; errors (a typo in
// the file) are logged and the file is read again at the next tick.
func (ff *FaultFile) Watch(ctx context.Context, interval time.Duration) {
	logger := klog.FromContext(ctx)
	var last string
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if err := ff.Sync(); err != nil {
			if err.Error() != last {
				logger.Error(err, "Simulated faults not applied")
			}
			last = err.Error()
		} else {
			last = ""
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
