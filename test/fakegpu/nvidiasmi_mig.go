package fakegpu

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/internal/plugin/mig"
	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/test/nvmlsim"
	"github.com/gpudra/gpudra/test/sim"
)

// The MIG commands of the fake nvidia-smi change the simulated node's MIG
// state the way an administrator prepares a node for --mig=static:
//
//	nvidia-smi -i <index>[,<index>...] -mig 1|0
//	nvidia-smi mig -i <index>[,<index>...] -cgi <profile>[,<profile>...] -C
//	nvidia-smi mig -i <index>[,<index>...] -dci -dgi
//
// They work on the node of the fake driver root the tool is installed in
// (<R>/usr/bin/nvidia-smi, or $GPUDRA_SIM_NVML_ROOT) through the simulator
// and its MIG state file, like a real nvidia-smi through the driver. A
// plugin that runs meanwhile keeps what it read at its start: restart it
// afterwards, as on a real node (a static plugin never looks again).

// isMIGCommand tells the MIG commands from compute-policy.
func isMIGCommand(args []string) bool {
	return len(args) > 0 && (args[0] == "mig" || args[0] == "-i" && len(args) == 4 && args[2] == "-mig")
}

// migSMI runs a MIG command and returns the exit code.
func migSMI(args []string, stdout, stderr io.Writer) int {
	cmd, err := parseMIGCommand(args)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "fake nvidia-smi: %v\n", err)
		return 2
	}
	srv, err := openSimulatedNode()
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "fake nvidia-smi: %v\n", err)
		return 9 // nvidia-smi's "NVIDIA driver is not loaded"
	}
	defer func() { _ = srv.Shutdown() }()
	for _, idx := range cmd.gpus {
		if err := cmd.run(srv, idx, stdout); err != nil {
			_, _ = fmt.Fprintf(stderr, "GPU %d: %v\n", idx, err)
			return 1
		}
	}
	_, _ = fmt.Fprintln(stdout, "All done.")
	return 0
}

type migCommand struct {
	gpus []int
	// mode is "1" or "0" for -mig; empty for the mig subcommand.
	mode     string
	profiles []string // -cgi ... -C
	destroy  bool     // -dci -dgi
}

func parseMIGCommand(args []string) (*migCommand, error) {
	c := &migCommand{}
	sub := args[0] == "mig"
	if sub {
		args = args[1:]
	}
	var createCI, dci, dgi bool
	for i := 0; i < len(args); i++ {
		a := args[i]
		value := func() (string, error) {
			if i+1 >= len(args) {
				return "", fmt.Errorf("%s needs a value", a)
			}
			i++
			return args[i], nil
		}
		var err error
		var v string
		switch {
		case a == "-i":
			if v, err = value(); err == nil {
				c.gpus, err = parseIndices(v)
			}
		case a == "-mig" && !sub:
			if v, err = value(); err == nil && v != "0" && v != "1" {
				err = fmt.Errorf("-mig %q: must be 0 or 1", v)
			}
			c.mode = v
		case a == "-cgi" && sub:
			if v, err = value(); err == nil {
				c.profiles = strings.Split(v, ",")
			}
		case a == "-C" && sub:
			createCI = true
		case a == "-dci" && sub:
			dci = true
		case a == "-dgi" && sub:
			dgi = true
		default:
			err = fmt.Errorf("%q is not simulated (simulated: -i <idx> -mig 0|1; mig -i <idx> -cgi <profiles> -C; mig -i <idx> -dci -dgi)", a)
		}
		if err != nil {
			return nil, err
		}
	}
	switch {
	case len(c.gpus) == 0:
		return nil, errors.New("name the GPUs with -i <index>[,<index>...]")
	case !sub:
		return c, nil
	case len(c.profiles) > 0 && createCI && !dci && !dgi:
		return c, nil
	case len(c.profiles) == 0 && !createCI && dci && dgi:
		c.destroy = true
		return c, nil
	}
	return nil, errors.New("simulated mig commands: -cgi <profiles> -C (GPU instances with a compute instance each) or -dci -dgi (destroy all)")
}

func parseIndices(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("-i %q: GPU indices only", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// openSimulatedNode opens the node of this tool's fake driver root with its
// MIG state file, as the simulated libnvidia-ml does (test/nvmlsim).
// listGPUs answers `nvidia-smi -L` from the root's simulated node: one line
// per GPU as the real tool prints it ("GPU 0: NVIDIA L4 (UUID: GPU-...)").
// The MIG devices the real tool lists under their GPU are left out. A GPU
// that does not answer fails the command, as with the real tool.
func listGPUs(stdout, stderr io.Writer) int {
	srv, err := openSimulatedNode()
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "fake nvidia-smi: %v\n", err)
		return 9
	}
	defer func() { _ = srv.Shutdown() }()
	n, ret := srv.DeviceGetCount()
	if ret != nvml.SUCCESS {
		_, _ = fmt.Fprintf(stderr, "Unable to count the GPUs: %v\n", ret)
		return 9
	}
	for i := range n {
		d, ret := srv.DeviceGetHandleByIndex(i)
		name, _ := d.GetName()
		uuid, ret2 := d.GetUUID()
		if ret != nvml.SUCCESS || ret2 != nvml.SUCCESS {
			_, _ = fmt.Fprintf(stderr, "Unable to determine the device handle for GPU %d: %v\n", i, ret)
			return 15
		}
		_, _ = fmt.Fprintf(stdout, "GPU %d: %s (UUID: %s)\n", i, name, uuid)
	}
	return 0
}

func openSimulatedNode() (*sim.Server, error) {
	exe, err := executable()
	if err != nil {
		exe = ""
	}
	root, err := nvmlsim.FindRoot(os.Getenv(nvmlsim.RootEnv), []string{exe})
	if err != nil {
		return nil, err
	}
	cfg, err := nvmlsim.LoadConfig(root)
	if err != nil {
		return nil, err
	}
	if cfg.StateFile == "" {
		return nil, fmt.Errorf("%s/%s has no stateFile: MIG changes would be lost", root, nvmlsim.ConfigPath)
	}
	p, err := sim.Load(cfg.Profile, cfg.ProfileDirs)
	if err != nil {
		return nil, err
	}
	srv := sim.NewServer(p, cfg.Node)
	if err := srv.PersistTo(cfg.StateFile); err != nil {
		return nil, err
	}
	if ret := srv.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("simulated node %s: %w", cfg.Node, ret)
	}
	return srv, nil
}

func (c *migCommand) run(lib nvml.Interface, idx int, out io.Writer) error {
	dev, ret := lib.DeviceGetHandleByIndex(idx)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("no such GPU: %w", ret)
	}
	uuid, ret := dev.GetUUID()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("get UUID: %w", ret)
	}
	if c.mode == "1" {
		if ret, _ := dev.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
			return fmt.Errorf("unable to enable MIG mode: %w", ret)
		}
		_, _ = fmt.Fprintf(out, "Enabled MIG Mode for GPU %s\n", uuid)
		return nil
	}
	mem, ret := dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("get memory: %w", ret)
	}
	geo, err := mig.Geometry(dev, mem.Total)
	if err != nil {
		return fmt.Errorf("not MIG-capable: %w", err)
	}
	m := mig.NewManager(lib)
	switch {
	case c.mode == "0":
		if err := m.ReleaseForWholeGPU(uuid, geo); err != nil {
			return fmt.Errorf("unable to disable MIG mode (destroy its instances first: nvidia-smi mig -i %d -dci -dgi): %w", idx, err)
		}
		_, _ = fmt.Fprintf(out, "Disabled MIG Mode for GPU %s\n", uuid)
		return nil
	case c.destroy:
		insts, err := m.Instances(uuid, geo)
		if err != nil {
			return err
		}
		for _, in := range insts {
			if err := m.Destroy(in); err != nil {
				return err
			}
			_, _ = fmt.Fprintf(out, "Successfully destroyed compute instance ID %d from GPU %d GPU instance ID %d\n", in.CIID, idx, in.GIID)
			_, _ = fmt.Fprintf(out, "Successfully destroyed GPU instance ID %d from GPU %d\n", in.GIID, idx)
		}
		return nil
	}
	if mode, _, ret := dev.GetMigMode(); ret != nvml.SUCCESS || mode != nvml.DEVICE_MIG_ENABLE {
		return fmt.Errorf("MIG mode is disabled: enable it with nvidia-smi -i %d -mig 1", idx)
	}
	for _, name := range c.profiles {
		p := profileByName(geo, name)
		if p == nil {
			return fmt.Errorf("unknown GPU instance profile %q", name)
		}
		in, err := createFirstFit(m, uuid, *p)
		if err != nil {
			return err
		}
		_, _ = fmt.Fprintf(out, "Successfully created GPU instance ID %d on GPU %d using profile MIG %s (ID %d)\n", in.GIID, idx, p.Name, p.ID)
		_, _ = fmt.Fprintf(out, "Successfully created compute instance ID %d on GPU %d GPU instance ID %d (UUID %s)\n", in.CIID, idx, in.GIID, in.UUID)
	}
	return nil
}

func profileByName(geo *model.MIGGeometry, name string) *model.MIGProfile {
	for i := range geo.Profiles {
		if geo.Profiles[i].Name == name {
			return &geo.Profiles[i]
		}
	}
	return nil
}

// createFirstFit creates p at its first free placement.
func createFirstFit(m *mig.Manager, uuid string, p model.MIGProfile) (mig.Instance, error) {
	for _, start := range p.Placements {
		in, err := m.Create(uuid, p, start)
		if err == nil {
			return in, nil
		}
		if !errors.Is(err, mig.ErrOccupied) {
			return in, err
		}
	}
	return mig.Instance{}, fmt.Errorf("unable to create a GPU instance of profile %s: no free placement left (Insufficient Resources)", p.Name)
}
