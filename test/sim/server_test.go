package sim

import (
	"fmt"
	"reflect"
	"regexp"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newServer(t *testing.T, profile, node string) *Server {
	t.Helper()
	p, err := Load(profile, nil)
	require.NoError(t, err)
	s := NewServer(p, node)
	require.Equal(t, nvml.SUCCESS, s.Init())
	t.Cleanup(func() { _ = s.Shutdown() })
	return s
}

func uuids(t *testing.T, s nvml.Interface) []string {
	t.Helper()
	n, ret := s.DeviceGetCount()
	require.Equal(t, nvml.SUCCESS, ret)
	var out []string
	for i := range n {
		d, ret := s.DeviceGetHandleByIndex(i)
		require.Equal(t, nvml.SUCCESS, ret)
		id, ret := d.GetUUID()
		require.Equal(t, nvml.SUCCESS, ret)
		out = append(out, id)
	}
	return out
}

var gpuUUIDRE = regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestUUIDStability(t *testing.T) {
	a := uuids(t, newServer(t, "dgx-h100", "node-a"))
	again := uuids(t, newServer(t, "dgx-h100", "node-a"))
	b := uuids(t, newServer(t, "dgx-h100", "node-b"))
	other := uuids(t, newServer(t, "dgx-a100", "node-a"))

	assert.Equal(t, a, again, "same node and profile: same UUIDs")
	seen := map[string]bool{}
	for i, id := range a {
		assert.Regexp(t, gpuUUIDRE, id)
		assert.NotEqual(t, id, b[i], "another node: other UUIDs")
		assert.NotEqual(t, id, other[i], "another profile: other UUIDs")
		assert.False(t, seen[id], "UUIDs are unique on a node")
		seen[id] = true
	}
}

func cString[T ~int8 | ~uint8](chars []T) string {
	b := make([]byte, 0, len(chars))
	for _, c := range chars {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}

func TestPCIInfo(t *testing.T) {
	s := newServer(t, "dgx-h100", "n1")
	d, _ := s.DeviceGetHandleByIndex(0)
	info, ret := d.GetPciInfo()
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Equal(t, "00000000:1B:00.0", cString(info.BusId[:]))
	assert.Equal(t, "0000:1B:00.0", cString(info.BusIdLegacy[:]))
	assert.Equal(t, []uint32{0, 0x1b, 0}, []uint32{info.Domain, info.Bus, info.Device})
	assert.Equal(t, uint32(0x233010DE), info.PciDeviceId)
	assert.Equal(t, uint32(0x16C110DE), info.PciSubSystemId)

	ext, ret := d.GetPciInfoExt()
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Equal(t, "00000000:1B:00.0", cString(ext.BusId[:]))
	assert.Equal(t, []uint32{0x03, 0x02}, []uint32{ext.BaseClass, ext.SubClass})

	for _, id := range []string{"0000:1b:00.0", "00000000:1B:00.0", "0000:1B:00.0", "1b:00.0"} {
		h, ret := s.DeviceGetHandleByPciBusId(id)
		require.Equal(t, nvml.SUCCESS, ret, id)
		assert.Same(t, d, h, id)
		root, ok := s.PCIeRoot(id)
		assert.True(t, ok)
		assert.Equal(t, "pci0000:15", root)
	}
	_, ret = s.DeviceGetHandleByPciBusId("0000:1c:00.0")
	assert.Equal(t, nvml.ERROR_NOT_FOUND, ret)
	_, ret = s.DeviceGetHandleByPciBusId("garbage")
	assert.Equal(t, nvml.ERROR_INVALID_ARGUMENT, ret)
	_, ok := s.PCIeRoot("0000:1c:00.0")
	assert.False(t, ok)
}

func TestInitShutdown(t *testing.T) {
	p, err := Load("l4", nil)
	require.NoError(t, err)
	s := NewServer(p, "n1")
	_, ret := s.DeviceGetCount()
	assert.Equal(t, nvml.ERROR_UNINITIALIZED, ret, "like real NVML, calls need Init")
	assert.Error(t, s.Extensions().LookupSymbol("nvmlInit_v2"))
	assert.Equal(t, nvml.ERROR_UNINITIALIZED, s.Shutdown())

	require.Equal(t, nvml.SUCCESS, s.Init())
	require.Equal(t, nvml.SUCCESS, s.InitWithFlags(0))
	assert.NoError(t, s.Extensions().LookupSymbol("nvmlInit_v2"))
	require.Equal(t, nvml.SUCCESS, s.Shutdown())
	n, ret := s.DeviceGetCount()
	assert.Equal(t, nvml.SUCCESS, ret, "reference counted: one Init is still active")
	assert.Equal(t, 2, n)
	require.Equal(t, nvml.SUCCESS, s.Shutdown())
	_, ret = s.SystemGetDriverVersion()
	assert.Equal(t, nvml.ERROR_UNINITIALIZED, ret)
}

// TestListedCalls calls every modelled NVML call on every GPU of every
// built-in profile.
func TestListedCalls(t *testing.T) {
	for _, name := range Builtin() {
		t.Run(name, func(t *testing.T) {
			s := newServer(t, name, "n1")
			p := s.Profile()
			drv, ret := s.SystemGetDriverVersion()
			require.Equal(t, nvml.SUCCESS, ret)
			assert.Equal(t, p.DriverVersion, drv)
			nvmlVersion, ret := s.SystemGetNVMLVersion()
			require.Equal(t, nvml.SUCCESS, ret)
			assert.Equal(t, fmt.Sprintf("%d.%s", p.CUDADriverVersion/1000, drv), nvmlVersion)
			cuda, ret := s.SystemGetCudaDriverVersion()
			require.Equal(t, nvml.SUCCESS, ret)
			assert.Equal(t, p.CUDADriverVersion, cuda)
			cuda2, _ := s.SystemGetCudaDriverVersion_v2()
			assert.Equal(t, cuda, cuda2)
			assert.Equal(t, "ERROR_NOT_SUPPORTED", s.ErrorString(nvml.ERROR_NOT_SUPPORTED))

			for i, g := range p.GPUs {
				d, ret := s.DeviceGetHandleByIndex(i)
				require.Equal(t, nvml.SUCCESS, ret)
				checkGPU(t, s, d, g)
			}
			_, ret = s.DeviceGetHandleByIndex(len(p.GPUs))
			assert.Equal(t, nvml.ERROR_INVALID_ARGUMENT, ret)
			_, ret = s.DeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000")
			assert.Equal(t, nvml.ERROR_NOT_FOUND, ret)
		})
	}
}

func checkGPU(t *testing.T, s *Server, d nvml.Device, g GPU) {
	m := g.Model
	ok := func(ret nvml.Return, what string) { assert.Equal(t, nvml.SUCCESS, ret, what) }
	id, ret := d.GetUUID()
	ok(ret, "GetUUID")
	byUUID, ret := s.DeviceGetHandleByUUID(id)
	ok(ret, "DeviceGetHandleByUUID")
	assert.Same(t, d, byUUID)
	viaLib, ret := s.DeviceGetUUID(d) // Interface methods forward to the handle
	ok(ret, "DeviceGetUUID")
	assert.Equal(t, id, viaLib)
	serial, ret := d.GetSerial()
	ok(ret, "GetSerial")
	assert.Len(t, serial, 13)
	bySerial, ret := s.DeviceGetHandleBySerial(serial)
	ok(ret, "DeviceGetHandleBySerial")
	assert.Same(t, d, bySerial)
	name, ret := d.GetName()
	ok(ret, "GetName")
	assert.Equal(t, m.ProductName, name)
	brand, ret := d.GetBrand()
	ok(ret, "GetBrand")
	assert.Equal(t, nvml.BRAND_NVIDIA, brand)
	arch, ret := d.GetArchitecture()
	ok(ret, "GetArchitecture")
	assert.Equal(t, m.Architecture, arch)
	major, minor, ret := d.GetCudaComputeCapability()
	ok(ret, "GetCudaComputeCapability")
	assert.Equal(t, []int{m.ComputeCapabilityMajor, m.ComputeCapabilityMinor}, []int{major, minor})
	minorNumber, ret := d.GetMinorNumber()
	ok(ret, "GetMinorNumber")
	index, ret := d.GetIndex()
	ok(ret, "GetIndex")
	assert.Equal(t, []int{g.Index, g.Index}, []int{minorNumber, index})
	mem, ret := d.GetMemoryInfo()
	ok(ret, "GetMemoryInfo")
	assert.Equal(t, nvml.Memory{Total: m.MemoryBytes, Free: m.MemoryBytes}, mem)
	mem2, ret := d.GetMemoryInfo_v2()
	ok(ret, "GetMemoryInfo_v2")
	assert.Equal(t, m.MemoryBytes, mem2.Total)
	assert.Equal(t, m.MemoryBytes, mem2.Free)
	pci, ret := d.GetPciInfo()
	ok(ret, "GetPciInfo")
	addr, _ := parsePCIAddress(g.PCIBusID)
	assert.Equal(t, addr.nvmlBusID(), cString(pci.BusId[:]))
	_, ret = d.GetPciInfoExt()
	ok(ret, "GetPciInfoExt")
	_, ret = d.GetNumaNodeId()
	if m.NVML.NUMANodeID == "gpu-memory" {
		assert.Equal(t, nvml.SUCCESS, ret, "Grace: the GPU's memory is a NUMA node (capabilities.go)")
	} else {
		assert.Equal(t, nvml.ERROR_NOT_SUPPORTED, ret, "x86: the GPU is no NUMA node (capabilities.go)")
	}
	numa, known := s.PCINUMANode(g.PCIBusID)
	assert.True(t, known)
	assert.Equal(t, g.NUMANode, numa, "sysfs's numa_node of the PCI device")
	_, ret = d.GetBoardPartNumber()
	assert.Equal(t, nvml.ERROR_NOT_SUPPORTED, ret, "no board part number in the catalogue")

	ok(d.SetComputeMode(nvml.COMPUTEMODE_EXCLUSIVE_PROCESS), "SetComputeMode")
	cm, ret := d.GetComputeMode()
	ok(ret, "GetComputeMode")
	assert.Equal(t, nvml.COMPUTEMODE_EXCLUSIVE_PROCESS, cm)
	assert.Equal(t, nvml.ERROR_INVALID_ARGUMENT, d.SetComputeMode(nvml.COMPUTEMODE_COUNT))

	isMIG, ret := d.IsMigDeviceHandle()
	ok(ret, "IsMigDeviceHandle")
	assert.False(t, isMIG)
	_, ret = d.GetDeviceHandleFromMigDeviceHandle()
	assert.Equal(t, nvml.ERROR_INVALID_ARGUMENT, ret)

	cur, pending, ret := d.GetMigMode()
	maxMIG, ret2 := d.GetMaxMigDeviceCount()
	_, ret3 := d.GetMigDeviceHandleByIndex(0)
	_, ret4 := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	activation, ret5 := d.SetMigMode(nvml.DEVICE_MIG_ENABLE)
	if !m.MIGCapable() {
		for _, r := range []nvml.Return{ret, ret2, ret3, ret4, ret5, activation} {
			assert.Equal(t, nvml.ERROR_NOT_SUPPORTED, r, "MIG calls on %s", m.Name)
		}
		return
	}
	ok(ret, "GetMigMode")
	assert.Equal(t, []int{0, 0}, []int{cur, pending})
	ok(ret2, "GetMaxMigDeviceCount")
	assert.Equal(t, 7, maxMIG)
	assert.Equal(t, nvml.ERROR_NOT_FOUND, ret3, "no MIG devices yet")
	ok(ret4, "GetGpuInstanceProfileInfo")
	ok(ret5, "SetMigMode")
	cur, pending, _ = d.GetMigMode()
	if m.Architecture == nvml.DEVICE_ARCH_AMPERE {
		// Pending until a GPU reset (migcaps.go).
		assert.Equal(t, nvml.ERROR_IN_USE, activation, "SetMigMode activation")
		assert.Equal(t, []int{0, 1}, []int{cur, pending})
		return
	}
	ok(activation, "SetMigMode activation")
	assert.Equal(t, []int{1, 1}, []int{cur, pending})
}

func TestL4HasNoMIG(t *testing.T) {
	s := newServer(t, "l4", "n1")
	d, _ := s.DeviceGetHandleByIndex(0)
	_, _, ret := d.GetMigMode()
	assert.Equal(t, nvml.ERROR_NOT_SUPPORTED, ret)
	_, _, ret = s.DeviceGetMigMode(d)
	assert.Equal(t, nvml.ERROR_NOT_SUPPORTED, ret)
}

// TestNoCallPanics calls every method of every handle type with zero
// arguments: unmodelled calls must answer, not panic.
func TestNoCallPanics(t *testing.T) {
	s := newServer(t, "dgx-h100", "n1")
	d, _ := s.DeviceGetHandleByIndex(0)
	require.Equal(t, nvml.SUCCESS, func() nvml.Return { _, r := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); return r }())
	info, _ := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_7_SLICE)
	giHandle, ret := d.CreateGpuInstance(&info)
	require.Equal(t, nvml.SUCCESS, ret)
	ciInfo, _ := giHandle.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	ciHandle, ret := giHandle.CreateComputeInstance(&ciInfo)
	require.Equal(t, nvml.SUCCESS, ret)
	migHandle, ret := d.GetMigDeviceHandleByIndex(0)
	require.Equal(t, nvml.SUCCESS, ret)

	l4, _ := newServer(t, "l4", "n1").DeviceGetHandleByIndex(0)
	for _, h := range []any{d, l4, giHandle, ciHandle, migHandle, s} {
		callAll(t, h)
	}
	_, ret = d.GetFanSpeed()
	assert.Equal(t, nvml.ERROR_NOT_SUPPORTED, ret, "unmodelled calls answer NOT_SUPPORTED")
	_, ret = s.DeviceGetFanSpeed(d)
	assert.Equal(t, nvml.ERROR_NOT_SUPPORTED, ret)
	_, ret = s.DeviceGetFanSpeed(nil)
	assert.Equal(t, nvml.ERROR_INVALID_ARGUMENT, ret)
}

func callAll(t *testing.T, handle any) {
	v := reflect.ValueOf(handle)
	typ := v.Type()
	for i := range typ.NumMethod() {
		m := typ.Method(i)
		// XxxCalls are the moq mocks' call records, not NVML calls.
		if len(m.Name) > 5 && m.Name[len(m.Name)-5:] == "Calls" {
			continue
		}
		ft := m.Type
		args := make([]reflect.Value, 0, ft.NumIn()-1)
		for j := 1; j < ft.NumIn(); j++ {
			args = append(args, reflect.Zero(ft.In(j)))
		}
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%T.%s panicked: %v", handle, m.Name, r)
				}
			}()
			if ft.IsVariadic() {
				v.Method(i).CallSlice(args)
			} else {
				v.Method(i).Call(args)
			}
		}()
	}
}
