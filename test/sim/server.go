package sim

import (
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/google/uuid"
)

// uuidNamespace seeds all simulated UUIDs (uuid.NewSHA1). Never change it:
// doing so would change the UUIDs of every simulated node.
var uuidNamespace = uuid.MustParse("155503e5-babc-4709-b485-2f26f1d4eea4")

// Server is a simulated NVML library for one node. It implements
// nvml.Interface and is safe for concurrent use.
//
// Like the go-nvml mocks it embeds, a Server can be adjusted in tests by
// replacing its XxxFunc fields (for example to inject an error) before it is
// shared between goroutines.
type Server struct {
	mock.Interface
	mock.ExtendedInterface

	profile  *Profile
	nodeName string
	devices  []*device

	// mu guards refcount and the mutable state of all devices: MIG mode,
	// compute mode, GPU and compute instances. One lock keeps the lock order
	// trivial; the simulator is not performance-critical. With a state file
	// it also locks that file and takes in other processes' changes
	// (statesync.go).
	mu       stateMu
	refcount int
	// stateFile, when set, receives the MIG state after every change (see
	// PersistTo); lockFile serializes the processes that share it, and
	// fileID is the version this server last read or wrote. Guarded by mu.
	stateFile string
	lockFile  *os.File
	fileID    fileID

	// faults is the simulated fault state (faults.go); it has its own lock.
	faults *faultBook
	// procs are the processes that make GPUs busy (processes.go).
	procs processTable
	// clock drives the simulated load (telemetry.go); tests replace it.
	clock func() time.Time
}

var (
	_ nvml.Interface         = (*Server)(nil)
	_ nvml.ExtendedInterface = (*Server)(nil)
)

// NewServer builds a simulated NVML library for profile p on node nodeName.
// GPU UUIDs derive from (nodeName, p.Name, GPU index), so they are stable
// across restarts on one node and differ between nodes. Like real NVML,
// the server must be initialized with Init before use and released with
// Shutdown. p must come from Parse or Load and must not be modified.
func NewServer(p *Profile, nodeName string) *Server {
	s := &Server{profile: p, nodeName: nodeName, clock: time.Now}
	s.mu.s = s
	s.procs.now = func() time.Time { return s.clock() }
	for i := range p.GPUs {
		s.devices = append(s.devices, newDevice(s, &p.GPUs[i]))
	}
	s.setFuncs()
	fillUnset(&s.Interface, true)
	fillUnset(&s.ExtendedInterface, false)
	for _, d := range s.devices {
		d.createInitialMIGDevices()
	}
	s.installFaults()
	s.installGPM()
	for _, d := range s.devices {
		d.setTelemetryFuncs()
		d.setCapabilityFuncs()
	}
	for _, d := range s.devices {
		finishHandle(&d.Device, d)
	}
	return s
}

// Profile returns the profile the server simulates.
func (s *Server) Profile() *Profile { return s.profile }

// PCIeRoot returns the PCIe root complex (e.g. "pci0000:00") of the GPU with
// the given PCI bus ID, in any of the forms NVML and sysfs use. NVML does
// not report it; on a real node it comes from sysfs. It returns false for
// an unknown bus ID or when the profile does not name the root.
func (s *Server) PCIeRoot(pciBusID string) (string, bool) {
	addr, err := parsePCIAddress(pciBusID)
	if err != nil {
		return "", false
	}
	for _, d := range s.devices {
		if d.addr == addr {
			return d.gpu.PCIeRoot, d.gpu.PCIeRoot != ""
		}
	}
	return "", false
}

// PCIIDs returns the PCI vendor and device IDs of the GPU with the given
// bus ID as sysfs shows them (its vendor and device files): the halves of
// the model's pciDeviceID, which NVML reports as device<<16 | vendor. It
// returns false for an unknown bus ID.
func (s *Server) PCIIDs(pciBusID string) (vendor, device uint16, ok bool) {
	addr, err := parsePCIAddress(pciBusID)
	if err != nil {
		return 0, 0, false
	}
	for _, d := range s.devices {
		if d.addr == addr {
			id := d.gpu.Model.PCIDeviceID
			return uint16(id & 0xffff), uint16(id >> 16), true
		}
	}
	return 0, 0, false
}

func (s *Server) gpuUUID(index int) string {
	key := fmt.Sprintf("gpu/%s/%s/%d", s.nodeName, s.profile.Name, index)
	return "GPU-" + uuid.NewSHA1(uuidNamespace, []byte(key)).String()
}

// serialFor derives a stable 13-digit board serial number from a UUID.
func serialFor(id string) string {
	sum := sha1.Sum([]byte(id))
	return "1" + fmt.Sprintf("%012d", binary.BigEndian.Uint64(sum[:8])%1_000_000_000_000)
}

// initialized returns ERROR_UNINITIALIZED unless Init was called.
func (s *Server) initialized() nvml.Return {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refcount == 0 {
		return nvml.ERROR_UNINITIALIZED
	}
	return nvml.SUCCESS
}

var errUninitialized = errors.New("simulated NVML is not initialized: call Init first")

func (s *Server) setFuncs() {
	s.InitFunc = func() nvml.Return {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.refcount++
		return nvml.SUCCESS
	}
	s.InitWithFlagsFunc = func(uint32) nvml.Return { return s.Init() }
	s.ShutdownFunc = func() nvml.Return {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.refcount == 0 {
			return nvml.ERROR_UNINITIALIZED
		}
		s.refcount--
		return nvml.SUCCESS
	}
	s.ErrorStringFunc = func(r nvml.Return) string { return r.Error() }
	s.ExtensionsFunc = func() nvml.ExtendedInterface { return s }
	s.LookupSymbolFunc = func(name string) error {
		if s.initialized() != nvml.SUCCESS {
			return errUninitialized
		}
		if s.missingSymbol(name) {
			return fmt.Errorf("simulated NVML of driver %s: undefined symbol: %s", s.profile.DriverVersion, name)
		}
		return nil // every other symbol "exists": unmodelled calls answer ERROR_NOT_SUPPORTED
	}

	s.SystemGetDriverVersionFunc = func() (string, nvml.Return) {
		if ret := s.initialized(); ret != nvml.SUCCESS {
			return "", ret
		}
		return s.profile.DriverVersion, nvml.SUCCESS
	}
	s.SystemGetNVMLVersionFunc = func() (string, nvml.Return) {
		if ret := s.initialized(); ret != nvml.SUCCESS {
			return "", ret
		}
		// Real NVML reports "<CUDA major>.<driver version>", e.g. "12.550.90.07".
		return strconv.Itoa(s.profile.CUDADriverVersion/1000) + "." + s.profile.DriverVersion, nvml.SUCCESS
	}
	s.SystemGetCudaDriverVersionFunc = func() (int, nvml.Return) {
		if ret := s.initialized(); ret != nvml.SUCCESS {
			return 0, ret
		}
		return s.profile.CUDADriverVersion, nvml.SUCCESS
	}
	s.SystemGetCudaDriverVersion_v2Func = s.SystemGetCudaDriverVersionFunc

	s.DeviceGetCountFunc = func() (int, nvml.Return) {
		if ret := s.initialized(); ret != nvml.SUCCESS {
			return 0, ret
		}
		return len(s.devices), nvml.SUCCESS
	}
	s.DeviceGetHandleByIndexFunc = func(index int) (nvml.Device, nvml.Return) {
		if ret := s.initialized(); ret != nvml.SUCCESS {
			return nil, ret
		}
		if index < 0 || index >= len(s.devices) {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		return lookup(s.devices[index], s.devices[index])
	}
	s.DeviceGetHandleByUUIDFunc = func(id string) (nvml.Device, nvml.Return) {
		if ret := s.initialized(); ret != nvml.SUCCESS {
			return nil, ret
		}
		return s.deviceByUUID(id)
	}
	s.DeviceGetHandleByPciBusIdFunc = func(busID string) (nvml.Device, nvml.Return) {
		if ret := s.initialized(); ret != nvml.SUCCESS {
			return nil, ret
		}
		addr, err := parsePCIAddress(busID)
		if err != nil {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		for _, d := range s.devices {
			if d.addr == addr {
				return lookup(d, d)
			}
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	s.DeviceGetHandleBySerialFunc = func(serial string) (nvml.Device, nvml.Return) {
		if ret := s.initialized(); ret != nvml.SUCCESS {
			return nil, ret
		}
		for _, d := range s.devices {
			if d.serial == serial {
				return lookup(d, d)
			}
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
}

// deviceByUUID finds a GPU or, like real NVML, a MIG device by UUID; a
// lost GPU and its MIG devices answer ERROR_GPU_IS_LOST.
func (s *Server) deviceByUUID(id string) (nvml.Device, nvml.Return) {
	for _, d := range s.devices {
		if d.uuid == id {
			return lookup(d, d)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.devices {
		for _, m := range d.migDevicesLocked() {
			if m.uuid == id {
				return lookup(d, m)
			}
		}
	}
	return nil, nvml.ERROR_NOT_FOUND
}
