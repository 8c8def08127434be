package prepare

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/internal/plugin/vfio"
	"github.com/gpudra/gpudra/internal/shared/compat"
	"github.com/gpudra/gpudra/test/fakedriver"
)

// vfioEnv is a node of n GPUs with passthrough on, its sysfs a fake
// driver root's passthrough tree driven by the simulated kernel.
func vfioEnv(t *testing.T, n int) (*env, *fakedriver.Kernel, map[string]string) {
	e := newEnv(t, n)
	root := t.TempDir()
	var addrs []string
	for i := range e.node.GPUs {
		e.node.GPUs[i].PCIBusID = fmt.Sprintf("0000:%02x:00.0", 0x1b+i)
		addrs = append(addrs, e.node.GPUs[i].PCIBusID)
	}
	require.NoError(t, fakedriver.PassthroughTree(root, addrs))
	busy := map[string]string{} // by UUID
	k := &fakedriver.Kernel{Root: root, Busy: func(addr string) bool {
		for _, g := range e.node.GPUs {
			if g.PCIBusID == addr {
				return busy[g.UUID] != ""
			}
		}
		return false
	}}
	names := compat.MustResolve(compat.Flags{Passthrough: true})
	e.names = &names
	e.pass = &Passthrough{Sysfs: k, Dev: root, HostDev: "/host-root", Metadata: true,
		InUse: func(uuid string) (string, error) { return busy[uuid], nil }}
	return e, k, busy
}

func driverOf(t *testing.T, k *fakedriver.Kernel, addr string) string {
	d, err := k.Driver(addr)
	require.NoError(t, err)
	return d
}

func claimSpec(t *testing.T, m *Manager, uid string) *cdispec.Spec {
	b, err := os.ReadFile(m.cfg.CDI.SpecPath(uid))
	require.NoError(t, err)
	var s cdispec.Spec
	require.NoError(t, json.Unmarshal(b, &s))
	return &s
}

func TestPrepareVFIO(t *testing.T) {
	e, k, _ := vfioEnv(t, 2)
	m, _ := e.manager()
	addr := e.node.GPUs[1].PCIBusID
	group, err := k.IOMMUGroup(addr)
	require.NoError(t, err)

	devs, err := m.Prepare(ctx(t), gpuClaim(uidA, "vm", "gpu-vfio-1"))
	require.NoError(t, err)
	require.Equal(t, vfio.DriverVFIO, driverOf(t, k, addr))
	require.Equal(t, vfio.DriverNVIDIA, driverOf(t, k, e.node.GPUs[0].PCIBusID), "the other GPU stays")
	require.Len(t, devs, 1)
	require.NotNil(t, devs[0].Metadata)
	require.Equal(t, addr, *devs[0].Metadata.Attributes[vfio.PCIBusIDAttribute].StringValue)
	require.Equal(t, int64(group), *devs[0].Metadata.Attributes["iommuGroup"].IntValue)

	spec := claimSpec(t, m, uidA)
	require.Empty(t, spec.ContainerEdits.DeviceNodes, "none of the driver's nodes")
	require.Len(t, spec.Devices, 1)
	nodes := spec.Devices[0].ContainerEdits.DeviceNodes
	require.Len(t, nodes, 1, "no API device unless a VfioDeviceConfig asks")
	require.Equal(t, vfio.GroupPath(group), nodes[0].Path)
	require.Equal(t, "/host-root"+vfio.GroupPath(group), nodes[0].HostPath)

	again, err := m.Prepare(ctx(t), gpuClaim(uidA, "vm", "gpu-vfio-1"))
	require.NoError(t, err, "a repeated prepare returns the same")
	require.Equal(t, devs, again)

	require.NoError(t, m.Unprepare(ctx(t), ref(gpuClaim(uidA, "vm", "gpu-vfio-1"))))
	require.Equal(t, vfio.DriverNVIDIA, driverOf(t, k, addr))
	o, _ := k.Override(addr)
	require.Empty(t, o)
}

func TestPrepareVFIORefusals(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(e *env, m *Manager, busy map[string]string)
		claim   string
		errHas  string
		wantErr error
	}{
		{name: "GPU in use", claim: "gpu-vfio-0", errHas: "in use by pid 4242",
			setup: func(e *env, _ *Manager, busy map[string]string) { busy[e.node.GPUs[0].UUID] = "pid 4242" }},
		{name: "the GPU's device is prepared", claim: "gpu-vfio-0", wantErr: ErrConflict,
			setup: func(_ *env, m *Manager, _ map[string]string) {
				_, err := m.Prepare(ctx(t), gpuClaim(uidB, "ctr", "gpu-0"))
				require.NoError(t, err)
			}},
		{name: "shared", claim: "gpu-vfio-0", errHas: "cannot be shared"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, k, busy := vfioEnv(t, 1)
			m, _ := e.manager()
			if tc.setup != nil {
				tc.setup(e, m, busy)
			}
			c := gpuClaim(uidA, "vm", tc.claim)
			if tc.name == "shared" {
				c = configured(uidA, "vm", []alloc{{request: "gpu", device: tc.claim}}, `{"strategy":"TimeSlicing"}`)
			}
			_, err := m.Prepare(ctx(t), c)
			require.Error(t, err)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
			}
			require.ErrorContains(t, err, tc.errHas)
			require.Equal(t, vfio.DriverNVIDIA, driverOf(t, k, e.node.GPUs[0].PCIBusID))
			rec, err := m.cfg.Checkpoints.Get(uidA)
			require.NoError(t, err)
			require.Nil(t, rec, "a refused prepare leaves no record")
		})
	}
}

// A GPU's device cannot be prepared while its vfio device is.
func TestPrepareGPUWhilePassedThrough(t *testing.T) {
	e, _, _ := vfioEnv(t, 1)
	m, _ := e.manager()
	_, err := m.Prepare(ctx(t), gpuClaim(uidA, "vm", "gpu-vfio-0"))
	require.NoError(t, err)
	_, err = m.Prepare(ctx(t), gpuClaim(uidB, "ctr", "gpu-0"))
	require.ErrorIs(t, err, ErrConflict)
}

// A crash at any phase of a prepare or unprepare of a vfio claim converges:
// the restarted plugin rolls back or keeps the claim, the GPU's driver
// matches, and the kubelet's retries finish the job.
func TestVFIOCrashRecovery(t *testing.T) {
	tests := []struct {
		phase      string
		unprepare  bool
		wantDriver string
	}{
		{phase: phaseStarted, wantDriver: vfio.DriverNVIDIA},
		{phase: phaseCDIWritten, wantDriver: vfio.DriverNVIDIA},
		{phase: phaseCompleted, wantDriver: vfio.DriverVFIO},
		// The record is still PrepareCompleted: the claim is restored and
		// the kubelet's retried unprepare gives the GPU back.
		{phase: phaseUnprepareCDIRemoved, unprepare: true, wantDriver: vfio.DriverVFIO},
	}
	for _, tc := range tests {
		t.Run(tc.phase, func(t *testing.T) {
			e, k, _ := vfioEnv(t, 1)
			addr := e.node.GPUs[0].PCIBusID
			m, _ := e.manager()
			c := gpuClaim(uidA, "vm", "gpu-vfio-0")
			if tc.unprepare {
				_, err := m.Prepare(ctx(t), c)
				require.NoError(t, err)
				crash(t, tc.phase, func() { _ = m.Unprepare(ctx(t), ref(c)) })
			} else {
				crash(t, tc.phase, func() { _, _ = m.Prepare(ctx(t), c) })
			}
			m2, _ := e.manager()
			require.Equal(t, tc.wantDriver, driverOf(t, k, addr), "after the restart's recovery")
			_, err := m2.Prepare(ctx(t), c)
			require.NoError(t, err)
			require.Equal(t, vfio.DriverVFIO, driverOf(t, k, addr))
			require.NoError(t, m2.Unprepare(ctx(t), ref(c)))
			require.Equal(t, vfio.DriverNVIDIA, driverOf(t, k, addr))
		})
	}
}

// Prepare waits (InUseWait) for the processes using a GPU to exit before it
// passes the GPU through, instead of failing into the kubelet's resync
// (kubernetes#139836); processes that stay refuse the claim, naming them.
func TestPrepareVFIOWaitsForUsers(t *testing.T) {
	tests := []struct {
		name      string
		busyCalls int // InUse answers "in use" this often, then ""
		wait      time.Duration
		errHas    string
	}{
		{name: "processes exit while it waits", busyCalls: 3, wait: 10 * time.Second},
		{name: "not in use", busyCalls: 0, wait: 10 * time.Second},
		{name: "processes stay", busyCalls: 1 << 30, wait: 100 * time.Millisecond, errHas: "in use by pid 4242 (waited"},
		{name: "no wait: refused at once", busyCalls: 1, errHas: "in use by pid 4242"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, k, _ := vfioEnv(t, 1)
			calls := 0
			e.pass.InUseWait, e.pass.InUsePoll = tc.wait, 10*time.Millisecond
			e.pass.InUse = func(string) (string, error) {
				calls++
				if calls <= tc.busyCalls {
					return "pid 4242", nil
				}
				return "", nil
			}
			m, _ := e.manager()
			_, err := m.Prepare(ctx(t), gpuClaim(uidA, "vm", "gpu-vfio-0"))
			addr := e.node.GPUs[0].PCIBusID
			if tc.errHas != "" {
				require.ErrorContains(t, err, tc.errHas)
				require.Equal(t, vfio.DriverNVIDIA, driverOf(t, k, addr))
				return
			}
			require.NoError(t, err)
			require.Equal(t, vfio.DriverVFIO, driverOf(t, k, addr))
			require.Equal(t, tc.busyCalls+1, calls, "InUse asked until the GPU was free")
		})
	}
}
