package sim

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

const maxGPUs = 64

var driverVersionRE = regexp.MustCompile(`^[0-9]+\.[0-9]+(\.[0-9]+)?$`)

// Parse parses and validates a profile document (YAML). Unknown fields are
// rejected, and every error names the offending field, for example
// `gpus[1].model: unknown model "h1000", known: ...`.
func Parse(data []byte) (*Profile, error) {
	return parse(data, "", "")
}

func parse(data []byte, defaultName, source string) (*Profile, error) {
	var spec profileSpec
	if err := decodeStrict(data, &spec); err != nil {
		return nil, err
	}
	if spec.Name == "" {
		spec.Name = defaultName
	}
	p, err := spec.validate()
	if err != nil {
		return nil, err
	}
	p.Source = source
	return p, nil
}

func (s *profileSpec) validate() (*Profile, error) {
	if !nameRE.MatchString(s.Name) {
		return nil, fmt.Errorf("name: %q is not a valid profile name: use lower-case letters, digits, '-' and '.'", s.Name)
	}
	p := &Profile{Name: s.Name, Description: s.Description, DriverVersion: s.DriverVersion, IOMMUFD: s.IOMMUFD}
	if !driverVersionRE.MatchString(s.DriverVersion) {
		return nil, fmt.Errorf("driverVersion: %q is not a driver version like \"550.90.07\" (quote it in YAML)", s.DriverVersion)
	}
	major, minor, err := parseMajorMinor(string(s.CUDADriverVersion))
	if err != nil || major == 0 {
		return nil, fmt.Errorf("cudaDriverVersion: %q is not a CUDA version like \"12.4\"", string(s.CUDADriverVersion))
	}
	p.CUDADriverVersion = major*1000 + minor*10
	switch {
	case s.NUMANodesPerSocket == 0:
		p.NUMANodesPerSocket = 1
	case s.NUMANodesPerSocket < 0 || s.NUMANodesPerSocket > maxNUMANodesPerSocket:
		return nil, fmt.Errorf("numaNodesPerSocket: %d is not between 1 and %d", s.NUMANodesPerSocket, maxNUMANodesPerSocket)
	default:
		p.NUMANodesPerSocket = s.NUMANodesPerSocket
	}

	builtin, err := builtinModels()
	if err != nil {
		return nil, fmt.Errorf("internal error in the built-in model catalogue: %w", err)
	}
	models := maps.Clone(builtin)
	local := map[string]bool{}
	for i := range s.Models {
		m, err := s.Models[i].validate(fmt.Sprintf("models[%d]", i))
		if err != nil {
			return nil, err
		}
		if local[m.Name] {
			return nil, fmt.Errorf("models[%d].name: model %q is defined twice", i, m.Name)
		}
		local[m.Name] = true
		models[m.Name] = m // a model defined in the file replaces a built-in one
	}

	if len(s.GPUs) == 0 {
		return nil, fmt.Errorf("gpus: list at least one GPU")
	}
	busIDs := map[pciAddress]string{}
	var pending []int // GPUs without a bus ID
	for i := range s.GPUs {
		gpus, err := s.GPUs[i].expand(fmt.Sprintf("gpus[%d]", i), models, busIDs)
		if err != nil {
			return nil, err
		}
		for _, g := range gpus {
			if g.PCIBusID == "" {
				pending = append(pending, len(p.GPUs))
			}
			p.GPUs = append(p.GPUs, g)
		}
		if len(p.GPUs) > maxGPUs {
			return nil, fmt.Errorf("gpus: at most %d GPUs are supported per profile", maxGPUs)
		}
	}
	// GPUs without an explicit bus ID get the lowest free bus numbers.
	bus := uint32(1)
	for _, i := range pending {
		for {
			addr := pciAddress{Bus: bus}
			bus++
			if _, used := busIDs[addr]; !used {
				busIDs[addr] = "generated"
				p.GPUs[i].PCIBusID = addr.String()
				break
			}
		}
	}
	// NVML enumerates GPUs in PCI bus order.
	slices.SortStableFunc(p.GPUs, func(a, b GPU) int {
		x, _ := parsePCIAddress(a.PCIBusID)
		y, _ := parsePCIAddress(b.PCIBusID)
		switch {
		case x.less(y):
			return -1
		case y.less(x):
			return 1
		}
		return 0
	})
	if err := checkModuleIDs(p.GPUs); err != nil {
		return nil, err
	}
	if p.FabricManager, err = parseFabricManager(s.FabricManager, p.GPUs); err != nil {
		return nil, err
	}
	domains, err := validateNVLink(s.NVLink, len(p.GPUs))
	if err != nil {
		return nil, err
	}
	for i := range p.GPUs {
		p.GPUs[i].Index = i
		p.GPUs[i].NVLinkDomain = domains[i]
	}
	return p, nil
}

// expand turns one gpus[] entry into its GPUs, validating each setting
// where it is written.
func (g *gpuGroupSpec) expand(at string, models map[string]*Model, busIDs map[pciAddress]string) ([]GPU, error) {
	model, ok := models[g.Model]
	if !ok {
		if g.Model == "" {
			return nil, fmt.Errorf("%s: required, known models: %s", join(at, "model"), strings.Join(sortedKeys(models), ", "))
		}
		return nil, fmt.Errorf("%s: unknown model %q, known: %s (or define it under models)", join(at, "model"), g.Model, strings.Join(sortedKeys(models), ", "))
	}
	count := 1
	switch {
	case g.Count != nil:
		count = *g.Count
	case len(g.Devices) > 0:
		count = len(g.Devices)
	}
	if count < 1 || count > maxGPUs {
		return nil, fmt.Errorf("%s: must be between 1 and %d", join(at, "count"), maxGPUs)
	}
	if len(g.Devices) > count {
		return nil, fmt.Errorf("%s: lists %d devices but count is %d", join(at, "devices"), len(g.Devices), count)
	}
	if g.PCIBusID != "" && count > 1 {
		return nil, fmt.Errorf("%s: only allowed for a single GPU; list one bus ID per GPU under devices", join(at, "pciBusID"))
	}
	base := GPU{Model: model, ECCEnabled: model.ECCDefault}
	if err := g.apply(at, &base, busIDs); err != nil {
		return nil, err
	}
	gpus := make([]GPU, count)
	for k := range gpus {
		gpus[k] = base
		if k < len(g.Devices) {
			if err := g.Devices[k].apply(fmt.Sprintf("%s[%d]", join(at, "devices"), k), &gpus[k], busIDs); err != nil {
				return nil, err
			}
		}
		if err := checkMIGDevices(fmt.Sprintf("%s (GPU %d of this entry)", at, k), &gpus[k]); err != nil {
			return nil, err
		}
	}
	return gpus, nil
}

// apply validates the settings given at `at` and stores them in gpu.
func (d *deviceSpec) apply(at string, gpu *GPU, busIDs map[pciAddress]string) error {
	if d.PCIBusID != "" {
		addr, err := parsePCIAddress(d.PCIBusID)
		if err != nil {
			return fmt.Errorf("%s: %w", join(at, "pciBusID"), err)
		}
		if other, dup := busIDs[addr]; dup {
			return fmt.Errorf("%s: bus ID %s is already used by %s; each GPU needs its own", join(at, "pciBusID"), addr, other)
		}
		busIDs[addr] = join(at, "pciBusID")
		gpu.PCIBusID = addr.String()
	}
	if d.NUMANode != nil {
		if *d.NUMANode < -1 || *d.NUMANode > 1023 {
			return fmt.Errorf("%s: must be a NUMA node number, or -1 for unknown", join(at, "numaNode"))
		}
		gpu.NUMANode = *d.NUMANode
	}
	if d.PCIeRoot != "" {
		root, err := normalizePCIeRoot(d.PCIeRoot)
		if err != nil {
			return fmt.Errorf("%s: %w", join(at, "pcieRoot"), err)
		}
		gpu.PCIeRoot = root
	}
	if d.MIGEnabled != nil {
		if *d.MIGEnabled && !gpu.Model.MIGCapable() {
			return fmt.Errorf("%s: model %q is not MIG-capable", join(at, "migEnabled"), gpu.Model.Name)
		}
		gpu.MIGEnabled = *d.MIGEnabled
	}
	if d.ECCEnabled != nil {
		if !gpu.Model.ECC {
			return fmt.Errorf("%s: model %q has no ECC memory (set eccEnabled on the model to give it ECC)", join(at, "eccEnabled"), gpu.Model.Name)
		}
		gpu.ECCEnabled = *d.ECCEnabled
	}
	if d.Fabric != nil {
		if !gpu.Model.NVML.GPUFabric {
			return fmt.Errorf("%s: model %q has no NVLink fabric information (set nvml.gpuFabric on the model)", join(at, "fabric"), gpu.Model.Name)
		}
		f, err := d.Fabric.apply(join(at, "fabric"), gpu.Fabric)
		if err != nil {
			return err
		}
		gpu.Fabric = f
	}
	if d.ModuleID != nil {
		if *d.ModuleID < 1 || *d.ModuleID > maxModuleID {
			return fmt.Errorf("%s: must be a baseboard module number between 1 and %d", join(at, "moduleID"), maxModuleID)
		}
		gpu.ModuleID = *d.ModuleID
	}
	if d.MIGDevices != nil {
		if !gpu.Model.MIGCapable() {
			return fmt.Errorf("%s: model %q is not MIG-capable", join(at, "migDevices"), gpu.Model.Name)
		}
		for j, name := range d.MIGDevices {
			if _, ok := gpu.Model.MIG.GPUInstanceProfileByName(name); !ok {
				return fmt.Errorf("%s[%d]: unknown MIG profile %q for model %q, known: %s",
					join(at, "migDevices"), j, name, gpu.Model.Name, strings.Join(migProfileNames(gpu.Model.MIG), ", "))
			}
		}
		gpu.MIGDevices = slices.Clone(d.MIGDevices)
	}
	return nil
}

// checkMIGDevices verifies that the pre-created MIG devices fit together.
func checkMIGDevices(at string, gpu *GPU) error {
	if len(gpu.MIGDevices) == 0 {
		return nil
	}
	if !gpu.MIGEnabled {
		return fmt.Errorf("%s: migDevices needs migEnabled: true", at)
	}
	var placed []giSlot
	for _, name := range gpu.MIGDevices {
		prof, _ := gpu.Model.MIG.GPUInstanceProfileByName(name)
		start, ret := autoPlacement(gpu.Model.MIG, placed, prof)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("%s: migDevices %v do not fit on one %s: no room left for %s", at, gpu.MIGDevices, gpu.Model.Name, name)
		}
		placed = append(placed, giSlot{prof: prof, start: start})
	}
	return nil
}

func migProfileNames(m *MIG) []string {
	names := make([]string, len(m.GPUInstanceProfiles))
	for i, p := range m.GPUInstanceProfiles {
		names[i] = p.Name
	}
	return names
}
