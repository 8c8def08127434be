package sim

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
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
//	gpu-0 fabric in-progress       # NVLink fabric registration not completed yet
//	gpu-0 fabric completed TIMEOUT # registration completed with an error status
//	gpu-0 fabric-clique 2          # the fabric manager placed the GPU in clique 2
//	gpu-0 fabric-health degraded-bandwidth # health mask: bandwidth degraded (others FALSE)
//	gpu-0 fabric-health none       # health mask: every condition FALSE
//
// A GPU is named gpu-<index> (its device name) or by UUID; '#' starts a
// comment. A line that appears is injected once. When the last line naming a
// GPU goes away, the GPU is reset (Server.Reset): emptying or deleting the
// file repairs every GPU.
//
// Fabric lines (gpuFabric models only) are apart from the faults: a fabric
// line sets the GPU's fabric registration state (not-started, in-progress,
// completed; optionally a status of fabricStatuses) while it is present,
// replacing its profile's (Server.SetFabric); when the GPU's last fabric
// line goes away its registration is the profile's again (ClearFabric), as
// a registration in progress completes, without a GPU reset. Likewise a
// fabric-clique line replaces the clique ID the GPU reports once its
// registration completed (the cluster UUID stays the profile's), and a
// fabric-health line the conditions of its health mask that hold (any of
// fabricHealthFields, or none), as a real GPU reports after the fabric
// manager re-registered it in another clique or its NVLink bandwidth
// dropped. The three kinds combine (the last line of each kind wins). They
// neither cause nor hold off a reset.
type FaultFile struct {
	Path   string
	server *Server
	// active maps each applied line (normalized) to the GPU it names;
	// fabric lines are in fabric instead, the applied override by GPU
	// (fabricKey).
	active map[string]string
	fabric map[string]string
}

// Fault is one parsed line of a fault file.
type Fault struct {
	GPU string // device name or UUID as written
	// "xid", "ecc", "lost", "reset-required", "unbound", "thermal", "fabric",
	// "fabric-clique" or "fabric-health"
	Kind string
	XID  uint64
	// MIG: the GPU and compute instance of a MIG-scoped XID; nil for a
	// GPU-wide one.
	MIG *XIDScope
	// FabricState and FabricStatus of a fabric line (Kind "fabric"): a
	// state of fabricStates and, optionally, a status of fabricStatuses.
	FabricState, FabricStatus string
	// FabricClique of a fabric-clique line.
	FabricClique uint32
	// FabricHealth of a fabric-health line: the conditions that hold,
	// empty for "none".
	FabricHealth []string
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
	switch f.Kind {
	case "fabric":
		return strings.TrimSpace(f.GPU + " fabric " + f.FabricState + " " + f.FabricStatus)
	case "fabric-clique":
		return fmt.Sprintf("%s fabric-clique %d", f.GPU, f.FabricClique)
	case "fabric-health":
		if len(f.FabricHealth) == 0 {
			return f.GPU + " fabric-health none"
		}
		return f.GPU + " fabric-health " + strings.Join(f.FabricHealth, " ")
	}
	return f.GPU + " " + f.Kind
}

// NewFaultFile returns a control file for the server. Nothing is read yet.
func NewFaultFile(path string, s *Server) *FaultFile {
	return &FaultFile{Path: path, server: s, active: map[string]string{}, fabric: map[string]string{}}
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
		case (len(fields) == 3 || len(fields) == 4) && fields[1] == "fabric":
			if err := parseFabric(&f, fields[2:]); err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
		case len(fields) == 3 && fields[1] == "fabric-clique":
			c, err := strconv.ParseUint(fields[2], 10, 32)
			if err != nil {
				return nil, fmt.Errorf("line %d: %q is not an unsigned 32-bit clique ID", n, fields[2])
			}
			f.Kind, f.FabricClique = "fabric-clique", uint32(c)
		case len(fields) >= 3 && fields[1] == "fabric-health":
			if err := parseFabricHealth(&f, fields[2:]); err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
		case len(fields) == 2 && (fields[1] == "ecc" || fields[1] == "lost" || fields[1] == "thermal" ||
			fields[1] == "reset-required" || fields[1] == "unbound"):
			f.Kind = fields[1]
		default:
			return nil, fmt.Errorf("line %d: %q: want '<gpu> xid <n> [gi <id> [ci <id>]]', '<gpu> ecc', '<gpu> lost|reset-required|unbound', '<gpu> thermal', '<gpu> fabric <state> [<status>]', '<gpu> fabric-clique <id>' or '<gpu> fabric-health none|<condition>...'", n, strings.TrimSpace(line))
		}
		out = append(out, f)
	}
	return out, sc.Err()
}

// parseFabric reads "<state>" or "<state> <status>" of a fabric line.
func parseFabric(f *Fault, fields []string) error {
	if _, ok := fabricStates[fields[0]]; !ok {
		return fmt.Errorf("fabric state %q is not one of %s", fields[0], strings.Join(sortedKeys(fabricStates), ", "))
	}
	f.Kind, f.FabricState = "fabric", fields[0]
	if len(fields) == 2 {
		if _, ok := fabricStatuses[fields[1]]; !ok {
			return fmt.Errorf("fabric status %q is not one of %s", fields[1], strings.Join(sortedKeys(fabricStatuses), ", "))
		}
		f.FabricStatus = fields[1]
	}
	return nil
}

// parseFabricHealth reads "none" or the conditions of a fabric-health line.
func parseFabricHealth(f *Fault, fields []string) error {
	f.Kind, f.FabricHealth = "fabric-health", []string{}
	if len(fields) == 1 && fields[0] == "none" {
		return nil
	}
	for _, h := range fields {
		if _, ok := fabricHealthFields[h]; !ok {
			return fmt.Errorf("fabric health %q is not none or one of %s", h, strings.Join(sortedKeys(fabricHealthFields), ", "))
		}
		if !slices.Contains(f.FabricHealth, h) {
			f.FabricHealth = append(f.FabricHealth, h)
		}
	}
	slices.Sort(f.FabricHealth)
	return nil
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
	fabric := map[string]*FabricOverride{} // each GPU's fabric lines, the last of each kind
	for _, f := range faults {
		id, err := ff.server.resolve(f.GPU)
		if err != nil {
			return fmt.Errorf("fault file %s: %w", ff.Path, err)
		}
		if strings.HasPrefix(f.Kind, "fabric") {
			fabric[id] = withFabricLine(fabric[id], f)
			continue
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
	return ff.syncFabric(fabric)
}

// withFabricLine adds a fabric, fabric-clique or fabric-health line to a
// GPU's override (nil: none yet).
func withFabricLine(o *FabricOverride, f Fault) *FabricOverride {
	if o == nil {
		o = &FabricOverride{}
	}
	switch f.Kind {
	case "fabric":
		st := fabricStates[f.FabricState]
		o.State, o.Status = &st, nvml.SUCCESS
		if f.FabricStatus != "" {
			o.Status = fabricStatuses[f.FabricStatus]
		}
	case "fabric-clique":
		c := f.FabricClique
		o.CliqueID = &c
	case "fabric-health":
		o.Health = slices.Clone(f.FabricHealth)
	}
	return o
}

// fabricKey identifies an override, to apply each one once.
func fabricKey(o *FabricOverride) string {
	var b strings.Builder
	if o.State != nil {
		fmt.Fprintf(&b, "state %d %d;", *o.State, o.Status)
	}
	if o.CliqueID != nil {
		fmt.Fprintf(&b, "clique %d;", *o.CliqueID)
	}
	if o.Health != nil {
		fmt.Fprintf(&b, "health %s;", strings.Join(o.Health, ","))
	}
	return b.String()
}

// syncFabric applies each GPU's fabric lines (want) that are not applied
// yet and clears the fabric of the GPUs no fabric line names any more.
func (ff *FaultFile) syncFabric(want map[string]*FabricOverride) error {
	for id, o := range want {
		key := fabricKey(o)
		if ff.fabric[id] == key {
			continue
		}
		if err := ff.server.SetFabricOverride(id, *o); err != nil {
			return fmt.Errorf("fault file %s: %w", ff.Path, err)
		}
		ff.fabric[id] = key
	}
	for id := range ff.fabric {
		if _, still := want[id]; still {
			continue
		}
		if err := ff.server.ClearFabric(id); err != nil {
			return err
		}
		delete(ff.fabric, id)
	}
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
