package fmsim

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvfm/pkg/nvfm"
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/test/nvmlsim"
	"github.com/gpudra/gpudra/test/sim"
)

// GPU is one GPU of a partition as Fabric Manager describes it.
type GPU struct {
	// Module is the GPU's module ID, Fabric Manager's physical ID.
	Module int
	UUID   string
	// PCIBusID in NVML's form, "00000000:1B:00.0".
	PCIBusID string
}

// Partition is one partition Fabric Manager offers.
type Partition struct {
	ID   int
	GPUs []GPU
}

// Fabric is the simulated Fabric Manager of one fake driver root.
type Fabric struct {
	Mode       sim.FabricManagerMode
	Partitions []Partition
	// StateFile holds the active partitions (State).
	StateFile string
}

// LoadFabric builds the fabric of the fake driver root: its profile's partitions,
// with the GPUs the simulated libnvidia-ml reports on the root's node.
func LoadFabric(root string) (*Fabric, error) {
	cfg, err := nvmlsim.LoadConfig(root)
	if err != nil {
		return nil, err
	}
	p, err := sim.Load(cfg.Profile, cfg.ProfileDirs)
	if err != nil {
		return nil, err
	}
	return NewFabric(p, cfg.Node, filepath.Join(root, StatePath))
}

// NewFabric builds the fabric of profile p on node, keeping its state in stateFile.
func NewFabric(p *sim.Profile, node, stateFile string) (*Fabric, error) {
	f := &Fabric{Mode: p.FabricManager, StateFile: stateFile}
	parts := p.FabricPartitions()
	if len(parts) == 0 {
		return f, nil
	}
	srv := sim.NewServer(p, node)
	if ret := srv.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("simulated NVML of profile %s: %w", p.Name, ret)
	}
	defer func() { _ = srv.Shutdown() }()
	byModule := map[int]GPU{}
	for _, g := range p.GPUs {
		dev, ret := srv.DeviceGetHandleByIndex(g.Index)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("simulated GPU %d: %w", g.Index, ret)
		}
		uuid, ret := dev.GetUUID()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("simulated GPU %d: %w", g.Index, ret)
		}
		byModule[g.ModuleID] = GPU{Module: g.ModuleID, UUID: uuid, PCIBusID: nvmlBusID(g.PCIBusID)}
	}
	for _, fp := range parts {
		part := Partition{ID: fp.ID}
		for _, m := range fp.Modules {
			part.GPUs = append(part.GPUs, byModule[m])
		}
		f.Partitions = append(f.Partitions, part)
	}
	return f, nil
}

// nvmlBusID turns "0000:1b:00.0" into NVML's "00000000:1B:00.0".
func nvmlBusID(busID string) string {
	return "0000" + strings.ToUpper(busID)
}

// Reachable answers whether a connection to the Fabric Manager at address
// (a unix socket path when unix) gets through: only while the simulated
// daemon's socket exists. It has no TCP listener.
func Reachable(address string, unix bool) nvfm.Return {
	if !unix {
		return nvfm.CONNECTION_NOT_VALID
	}
	fi, err := os.Stat(address)
	if err != nil || fi.Mode()&os.ModeSocket == 0 {
		return nvfm.CONNECTION_NOT_VALID
	}
	return nvfm.SUCCESS
}

// partitionCall checks what every partition call checks: the mode, then
// whether Fabric Manager is still configuring the fabric.
func (f *Fabric) partitionCall(s State) nvfm.Return {
	if f.Mode != sim.FabricManagerSharedNVSwitch {
		return nvfm.NOT_SUPPORTED
	}
	if s.Initializing {
		return nvfm.NOT_CONFIGURED
	}
	return nvfm.SUCCESS
}

func (f *Fabric) partition(id int) (Partition, bool) {
	for _, p := range f.Partitions {
		if p.ID == id {
			return p, true
		}
	}
	return Partition{}, false
}

// Supported returns the partitions with whether each is active.
func (f *Fabric) Supported() ([]Partition, []bool, nvfm.Return) {
	s, err := ReadState(f.StateFile)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpudra simulated libnvfm: %v\n", err)
		return nil, nil, nvfm.GENERIC_ERROR
	}
	if ret := f.partitionCall(s); ret != nvfm.SUCCESS {
		return nil, nil, ret
	}
	active := make([]bool, len(f.Partitions))
	for i, p := range f.Partitions {
		active[i] = slices.Contains(s.Active, p.ID)
	}
	return f.Partitions, active, nvfm.SUCCESS
}

// Activate activates partition id: BADPARAM for an ID the fabric does not
// offer, IN_USE when it is active already or shares a GPU with an active
// partition (nv_fm_agent.h documents IN_USE for the first; what real FM
// answers for the second is not documented: the same code, so a caller
// cannot take IN_USE for "already active").
func (f *Fabric) Activate(id int) nvfm.Return {
	return f.update(func(s *State) (nvfm.Return, bool) {
		if ret := f.partitionCall(*s); ret != nvfm.SUCCESS {
			return ret, false
		}
		p, ok := f.partition(id)
		if !ok {
			return nvfm.BADPARAM, false
		}
		for _, a := range s.Active {
			other, _ := f.partition(a)
			if a == id || overlap(p, other) {
				return nvfm.IN_USE, false
			}
		}
		s.Active = append(s.Active, id)
		return nvfm.SUCCESS, true
	})
}

// Deactivate deactivates partition id: BADPARAM for an ID the fabric does
// not offer, UNINITIALIZED for one that is not active (nv_fm_agent.h's
// code for it).
func (f *Fabric) Deactivate(id int) nvfm.Return {
	return f.update(func(s *State) (nvfm.Return, bool) {
		if ret := f.partitionCall(*s); ret != nvfm.SUCCESS {
			return ret, false
		}
		if _, ok := f.partition(id); !ok {
			return nvfm.BADPARAM, false
		}
		i := slices.Index(s.Active, id)
		if i < 0 {
			return nvfm.UNINITIALIZED, false
		}
		s.Active = slices.Delete(s.Active, i, i+1)
		return nvfm.SUCCESS, true
	})
}

// SetActivated replaces the active partitions, as a hypervisor tells a
// restarted Fabric Manager which partitions are active: BADPARAM for an ID
// the fabric does not offer, a repeated one or two that share a GPU.
func (f *Fabric) SetActivated(ids []int) nvfm.Return {
	return f.update(func(s *State) (nvfm.Return, bool) {
		if ret := f.partitionCall(*s); ret != nvfm.SUCCESS {
			return ret, false
		}
		var parts []Partition
		for _, id := range ids {
			p, ok := f.partition(id)
			if !ok {
				return nvfm.BADPARAM, false
			}
			for _, q := range parts {
				if q.ID == id || overlap(p, q) {
					return nvfm.BADPARAM, false
				}
			}
			parts = append(parts, p)
		}
		s.Active = slices.Clone(ids)
		return nvfm.SUCCESS, true
	})
}

func (f *Fabric) update(change func(*State) (nvfm.Return, bool)) nvfm.Return {
	ret := nvfm.SUCCESS
	err := UpdateState(f.StateFile, func(s *State) bool {
		var write bool
		ret, write = change(s)
		return write
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpudra simulated libnvfm: %v\n", err)
		return nvfm.GENERIC_ERROR
	}
	return ret
}

func overlap(a, b Partition) bool {
	for _, g := range a.GPUs {
		for _, h := range b.GPUs {
			if g.Module == h.Module {
				return true
			}
		}
	}
	return false
}
