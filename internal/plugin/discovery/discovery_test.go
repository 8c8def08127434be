package discovery

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/test/sim"
)

func TestNormalizePCIBusID(t *testing.T) {
	tests := []struct{ in, want, err string }{
		{"00000000:1B:00.0", "0000:1b:00.0", ""},
		{"0000:1b:00.0", "0000:1b:00.0", ""},
		{"00000001:AF:00.0", "0001:af:00.0", ""},
		{"1:02:00.0", "0001:02:00.0", ""},
		{"1B:00.0", "", "unexpected PCI bus ID"},
	}
	for _, tc := range tests {
		got, err := NormalizePCIBusID(tc.in)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, got)
	}
}

func TestNames(t *testing.T) {
	require.Equal(t, "Hopper", ArchitectureName(nvml.DEVICE_ARCH_HOPPER))
	require.Equal(t, "Ada Lovelace", ArchitectureName(nvml.DEVICE_ARCH_ADA))
	require.Equal(t, "Unknown", ArchitectureName(nvml.DEVICE_ARCH_UNKNOWN))
	require.Equal(t, "Nvidia", BrandName(nvml.BRAND_NVIDIA))
	require.Equal(t, "Tesla", BrandName(nvml.BRAND_TESLA))
	require.Equal(t, "Unknown", BrandName(nvml.BrandType(99)))
}

func busID(s string) [32]int8 {
	var b [32]int8
	for i := 0; i < len(s); i++ {
		b[i] = int8(s[i])
	}
	return b
}

// fakeLib is a one-GPU NVML whose calls can be made to fail.
func fakeLib(failOn string, mig nvml.Return) *mock.Interface {
	ret := func(name string) nvml.Return {
		if name == failOn {
			return nvml.ERROR_UNKNOWN
		}
		return nvml.SUCCESS
	}
	dev := &mock.Device{
		GetUUIDFunc:        func() (string, nvml.Return) { return "GPU-1", ret("uuid") },
		GetMinorNumberFunc: func() (int, nvml.Return) { return 3, ret("minor") },
		GetNameFunc:        func() (string, nvml.Return) { return "NVIDIA L4", ret("name") },
		GetBrandFunc:       func() (nvml.BrandType, nvml.Return) { return nvml.BRAND_NVIDIA, ret("brand") },
		GetArchitectureFunc: func() (nvml.DeviceArchitecture, nvml.Return) {
			return nvml.DEVICE_ARCH_ADA, ret("arch")
		},
		GetCudaComputeCapabilityFunc: func() (int, int, nvml.Return) { return 8, 9, ret("cc") },
		GetMemoryInfoFunc:            func() (nvml.Memory, nvml.Return) { return nvml.Memory{Total: 24 << 30}, ret("mem") },
		GetPciInfoFunc: func() (nvml.PciInfo, nvml.Return) {
			return nvml.PciInfo{BusId: busID("00000000:17:00.0")}, ret("pci")
		},
		GetNumaNodeIdFunc: func() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED },
		GetMigModeFunc:    func() (int, int, nvml.Return) { return 0, 0, mig },
		GetEccModeFunc: func() (nvml.EnableState, nvml.EnableState, nvml.Return) {
			return nvml.FEATURE_ENABLED, nvml.FEATURE_ENABLED, ret("ecc")
		},
		// An L4 has no NVLink fabric.
		GetGpuFabricInfoFunc: func() (nvml.GpuFabricInfo, nvml.Return) { return nvml.GpuFabricInfo{}, nvml.ERROR_NOT_SUPPORTED },
		// An x86 host without HMM.
		GetAddressingModeFunc: func() (nvml.DeviceAddressingMode, nvml.Return) {
			return nvml.DeviceAddressingMode{}, nvml.ERROR_NOT_SUPPORTED
		},
		// A PCIe card: no baseboard module.
		GetModuleIdFunc: func() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED },
	}
	return &mock.Interface{
		// A library without the versioned fabric call (a driver before R550).
		ExtensionsFunc: func() nvml.ExtendedInterface {
			return &mock.ExtendedInterface{LookupSymbolFunc: func(sym string) error {
				if sym == fabricInfoVSymbol {
					return errors.New("undefined symbol: " + sym)
				}
				return nil
			}}
		},
		SystemGetDriverVersionFunc:     func() (string, nvml.Return) { return "550.54.15", ret("driver") },
		SystemGetCudaDriverVersionFunc: func() (int, nvml.Return) { return 12040, ret("cuda") },
		DeviceGetCountFunc:             func() (int, nvml.Return) { return 1, ret("count") },
		DeviceGetHandleByIndexFunc:     func(int) (nvml.Device, nvml.Return) { return dev, ret("handle") },
	}
}

type noRoot struct{ *mock.Interface }

func (noRoot) PCIeRoot(string) (string, bool) { return "", false }

func TestDiscover(t *testing.T) {
	node, err := Discover(context.Background(), noRoot{fakeLib("", nvml.ERROR_NOT_SUPPORTED)}, Options{})
	require.NoError(t, err)
	require.Equal(t, "12.4", node.CUDADriverVersion)
	require.Len(t, node.GPUs, 1)
	g := node.GPUs[0]
	require.Equal(t, "gpu-3", g.DeviceName())
	require.Equal(t, "0000:17:00.0", g.PCIBusID)
	require.Equal(t, "8.9", g.CUDAComputeCapability)
	require.Nil(t, g.NUMANode, "NVML without NUMA info publishes no numaNode")
	require.False(t, g.MIGCapable)
	require.Empty(t, g.PCIeRoot)
}

// eccEnabled is NVML's current ECC mode, not the pending one; a GPU without
// ECC (NOT_SUPPORTED) is not enabled; any other error makes the GPU
// unavailable (TestDiscoverGPUErrors).
func TestDiscoverECC(t *testing.T) {
	for _, tc := range []struct {
		name             string
		current, pending nvml.EnableState
		ret              nvml.Return
		want             bool
	}{
		{"enabled", nvml.FEATURE_ENABLED, nvml.FEATURE_ENABLED, nvml.SUCCESS, true},
		{"disabled", nvml.FEATURE_DISABLED, nvml.FEATURE_DISABLED, nvml.SUCCESS, false},
		{"disabled, enabled after the next reset", nvml.FEATURE_DISABLED, nvml.FEATURE_ENABLED, nvml.SUCCESS, false},
		{"enabled, disabled after the next reset", nvml.FEATURE_ENABLED, nvml.FEATURE_DISABLED, nvml.SUCCESS, true},
		{"no ECC", 0, 0, nvml.ERROR_NOT_SUPPORTED, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lib := fakeLib("", nvml.ERROR_NOT_SUPPORTED)
			dev, _ := lib.DeviceGetHandleByIndex(0)
			dev.(*mock.Device).GetEccModeFunc = func() (nvml.EnableState, nvml.EnableState, nvml.Return) {
				return tc.current, tc.pending, tc.ret
			}
			node, err := Discover(context.Background(), noRoot{lib}, Options{})
			require.NoError(t, err)
			require.Len(t, node.GPUs, 1)
			require.Equal(t, tc.want, node.GPUs[0].ECCEnabled)
		})
	}
}

// Failures of the library itself stop discovery.
func TestDiscoverLibraryErrors(t *testing.T) {
	for _, call := range []string{"driver", "cuda", "count"} {
		t.Run(call, func(t *testing.T) {
			_, err := Discover(context.Background(), noRoot{fakeLib(call, nvml.SUCCESS)}, Options{})
			require.Error(t, err)
			require.ErrorContains(t, err, "NVML")
			require.True(t, errors.Is(err, nvml.ERROR_UNKNOWN), "errors.Is must reach the NVML return code: %v", err)
		})
	}
	// A library-wide error on a GPU call is not that GPU's fault.
	lib := fakeLib("", nvml.ERROR_NOT_SUPPORTED)
	lib.DeviceGetHandleByIndexFunc = func(int) (nvml.Device, nvml.Return) { return nil, nvml.ERROR_UNINITIALIZED }
	_, err := Discover(context.Background(), noRoot{lib}, Options{})
	require.ErrorIs(t, err, nvml.ERROR_UNINITIALIZED)
}

// A GPU whose facts cannot be read is listed as unavailable, not fatal.
func TestDiscoverGPUErrors(t *testing.T) {
	for _, call := range []string{"handle", "uuid", "minor", "name", "brand", "arch", "cc", "mem", "pci", "ecc"} {
		t.Run(call, func(t *testing.T) {
			node, err := Discover(context.Background(), noRoot{fakeLib(call, nvml.SUCCESS)}, Options{})
			require.NoError(t, err)
			require.Empty(t, node.GPUs)
			require.Len(t, node.Unavailable, 1)
			u := node.Unavailable[0]
			require.Equal(t, 0, u.Index)
			require.Equal(t, ReasonUnreachable, u.Reason)
			require.ErrorContains(t, u.Err, "NVML")
			require.True(t, errors.Is(u.Err, nvml.ERROR_UNKNOWN), "errors.Is must reach the NVML return code: %v", u.Err)
			require.Equal(t, u.Err.Error(), u.Error)
			if call != "uuid" && call != "handle" {
				require.Equal(t, "GPU-1", u.UUID, "what was read before the failure is kept")
			}
			if call != "pci" && call != "handle" {
				require.Equal(t, "0000:17:00.0", u.PCIBusID, "the bus ID is asked for after a failure")
			}
		})
	}
	node, err := Discover(context.Background(), noRoot{fakeLib("", nvml.ERROR_GPU_IS_LOST)}, Options{})
	require.NoError(t, err)
	require.Len(t, node.Unavailable, 1)
	require.ErrorContains(t, node.Unavailable[0].Err, "get MIG mode")
	require.Equal(t, ReasonGPUIsLost, node.Unavailable[0].Reason)
}

// Issue 13: after an XID 79 one GPU fails every query, its handle lookup
// included. Discovery returns the node's other GPUs and lists the lost one.
func TestDiscoverWithLostGPU(t *testing.T) {
	p, err := sim.Load("dgx-h100", nil)
	require.NoError(t, err)
	srv := sim.NewServer(p, "node-a")
	require.Equal(t, nvml.SUCCESS, srv.Init())
	t.Cleanup(func() { _ = srv.Shutdown() })
	all, err := Discover(context.Background(), srv, Options{})
	require.NoError(t, err)
	require.Len(t, all.GPUs, 8)
	require.NoError(t, srv.InjectXID(all.GPUs[3].UUID, 79))

	node, err := Discover(context.Background(), srv, Options{})
	require.NoError(t, err, "one lost GPU must not fail discovery")
	require.Len(t, node.GPUs, 7)
	for _, g := range node.GPUs {
		require.NotEqual(t, 3, g.Index)
		require.NotEqual(t, all.GPUs[3].UUID, g.UUID)
	}
	require.Equal(t, all.GPUs[4], node.GPUs[3], "the GPUs after the lost one keep their facts and indexes")
	require.Len(t, node.Unavailable, 1)
	u := node.Unavailable[0]
	require.Equal(t, 3, u.Index)
	require.Equal(t, ReasonGPUIsLost, u.Reason)
	require.ErrorIs(t, u.Err, nvml.ERROR_GPU_IS_LOST)
	require.Empty(t, u.UUID, "a lost GPU tells nothing about itself")
	require.Empty(t, u.PCIBusID)

	require.NoError(t, srv.Reset(all.GPUs[3].UUID))
	node, err = Discover(context.Background(), srv, Options{})
	require.NoError(t, err)
	require.Equal(t, all.GPUs, node.GPUs, "after the reset the GPU is discovered again")
	require.Empty(t, node.Unavailable)
}

// On a machine without the GPU in sysfs the PCIe root is left out, not fatal.
func TestPCIeRootFromSysfsMissing(t *testing.T) {
	node, err := Discover(context.Background(), fakeLib("", nvml.ERROR_NOT_SUPPORTED), Options{SysfsRoot: t.TempDir()})
	require.NoError(t, err)
	require.Empty(t, node.GPUs[0].PCIeRoot)
}

// The PCIe root of a real GPU comes from the sysfs symlink of its bus ID.
func TestPCIeRootFromSysfs(t *testing.T) {
	root := t.TempDir()
	dev := filepath.Join(root, "devices", "pci0000:16", "0000:16:01.0", "0000:17:00.0")
	require.NoError(t, os.MkdirAll(dev, 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "bus", "pci", "devices"), 0o755))
	require.NoError(t, os.Symlink("../../../devices/pci0000:16/0000:16:01.0/0000:17:00.0",
		filepath.Join(root, "bus", "pci", "devices", "0000:17:00.0")))
	node, err := Discover(context.Background(), fakeLib("", nvml.ERROR_NOT_SUPPORTED), Options{SysfsRoot: root})
	require.NoError(t, err)
	require.Equal(t, "pci0000:16", node.GPUs[0].PCIeRoot)
}
