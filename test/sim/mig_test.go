package sim

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// migGPU returns GPU index i of the profile with MIG mode enabled.
func migGPU(t *testing.T, s *Server, i int) nvml.Device {
	t.Helper()
	d, ret := s.DeviceGetHandleByIndex(i)
	require.Equal(t, nvml.SUCCESS, ret)
	_, ret = d.SetMigMode(nvml.DEVICE_MIG_ENABLE)
	require.Equal(t, nvml.SUCCESS, ret)
	if cur, _, _ := d.GetMigMode(); cur != nvml.DEVICE_MIG_ENABLE {
		// Ampere: the mode is pending until the GPU is reset.
		id, _ := d.GetUUID()
		require.NoError(t, s.Reset(id))
	}
	return d
}

func giProfile(t *testing.T, d nvml.Device, profile int) nvml.GpuInstanceProfileInfo {
	t.Helper()
	info, ret := d.GetGpuInstanceProfileInfo(profile)
	require.Equal(t, nvml.SUCCESS, ret)
	return info
}

func ciProfileInfo(t *testing.T, gi nvml.GpuInstance, profile int) nvml.ComputeInstanceProfileInfo {
	t.Helper()
	info, ret := gi.GetComputeInstanceProfileInfo(profile, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	require.Equal(t, nvml.SUCCESS, ret)
	return info
}

func TestMIGOnH100(t *testing.T) {
	s := newServer(t, "dgx-h100", "n1")
	d, _ := s.DeviceGetHandleByIndex(0)
	threeG := giProfile(t, d, nvml.GPU_INSTANCE_PROFILE_3_SLICE)
	assert.Equal(t, nvml.GpuInstanceProfileInfo{Id: 9, SliceCount: 3, InstanceCount: 2, MultiprocessorCount: 60,
		CopyEngineCount: 3, DecoderCount: 3, JpegCount: 3, MemorySizeMB: 40448}, threeG)
	_, ret := d.CreateGpuInstance(&threeG)
	assert.Equal(t, nvml.ERROR_NOT_SUPPORTED, ret, "MIG mode is disabled")
	d = migGPU(t, s, 0)

	placements, ret := d.GetGpuInstancePossiblePlacements(&threeG)
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Equal(t, []nvml.GpuInstancePlacement{{Start: 0, Size: 4}, {Start: 4, Size: 4}}, placements)

	// A 3g.40gb in the upper half and a 4g.40gb in the lower half fill the GPU.
	gi3, ret := d.CreateGpuInstanceWithPlacement(&threeG, &nvml.GpuInstancePlacement{Start: 4, Size: 4})
	require.Equal(t, nvml.SUCCESS, ret)
	fourG := giProfile(t, d, nvml.GPU_INSTANCE_PROFILE_4_SLICE)
	gi4, ret := d.CreateGpuInstance(&fourG)
	require.Equal(t, nvml.SUCCESS, ret)
	info3, _ := gi3.GetInfo()
	info4, _ := gi4.GetInfo()
	assert.Equal(t, nvml.GpuInstanceInfo{Device: d, Id: 2, ProfileId: 9, Placement: nvml.GpuInstancePlacement{Start: 4, Size: 4}}, info3)
	assert.Equal(t, uint32(1), info4.Id)

	// Overlapping placements are refused.
	oneG := giProfile(t, d, nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	oneG20 := giProfile(t, d, nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2)
	assert.Equal(t, "1g.20gb", s.Profile().GPUs[0].Model.MIG.profileByID(oneG20.Id).Name)
	for _, tc := range []struct {
		info *nvml.GpuInstanceProfileInfo
		pl   nvml.GpuInstancePlacement
		want nvml.Return
	}{
		{&oneG, nvml.GpuInstancePlacement{Start: 0, Size: 1}, nvml.ERROR_INSUFFICIENT_RESOURCES},
		{&oneG20, nvml.GpuInstancePlacement{Start: 6, Size: 2}, nvml.ERROR_INSUFFICIENT_RESOURCES},
		{&threeG, nvml.GpuInstancePlacement{Start: 4, Size: 4}, nvml.ERROR_INSUFFICIENT_RESOURCES},
		{&oneG, nvml.GpuInstancePlacement{Start: 7, Size: 1}, nvml.ERROR_INVALID_ARGUMENT}, // not a placement of 1g
		{&threeG, nvml.GpuInstancePlacement{Start: 4, Size: 3}, nvml.ERROR_INVALID_ARGUMENT},
	} {
		_, ret := d.CreateGpuInstanceWithPlacement(tc.info, &tc.pl)
		assert.Equal(t, tc.want, ret, "profile %d at %+v", tc.info.Id, tc.pl)
	}
	_, ret = d.CreateGpuInstance(&oneG)
	assert.Equal(t, nvml.ERROR_INSUFFICIENT_RESOURCES, ret)
	left, ret := d.GetGpuInstanceRemainingCapacity(&oneG)
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Equal(t, 0, left)

	gis, ret := d.GetGpuInstances(&threeG)
	require.Equal(t, nvml.SUCCESS, ret)
	require.Len(t, gis, 1)
	assert.Same(t, gi3, gis[0])
	byID, ret := d.GetGpuInstanceById(2)
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Same(t, gi3, byID)

	// A compute instance spanning the 3g.40gb makes a MIG device.
	ci3 := ciProfileInfo(t, gi3, nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE)
	assert.Equal(t, nvml.ComputeInstanceProfileInfo{Id: 2, SliceCount: 3, InstanceCount: 1, MultiprocessorCount: 60,
		SharedCopyEngineCount: 3, SharedDecoderCount: 3, SharedJpegCount: 3}, ci3)
	ci, ret := gi3.CreateComputeInstance(&ci3)
	require.Equal(t, nvml.SUCCESS, ret)
	_, ret = gi3.CreateComputeInstance(&ci3)
	assert.Equal(t, nvml.ERROR_INSUFFICIENT_RESOURCES, ret)
	ciInfo, _ := ci.GetInfo()
	assert.Equal(t, nvml.ComputeInstanceInfo{Device: d, GpuInstance: gi3, Id: 0, ProfileId: 2,
		Placement: nvml.ComputeInstancePlacement{Start: 0, Size: 3}}, ciInfo)

	mig, ret := d.GetMigDeviceHandleByIndex(0)
	require.Equal(t, nvml.SUCCESS, ret)
	checkMIGDevice(t, s, d, mig, "NVIDIA H100 80GB HBM3 MIG 3g.40gb", 2, 0, 40448)
	_, ret = d.GetMigDeviceHandleByIndex(1)
	assert.Equal(t, nvml.ERROR_NOT_FOUND, ret)
	_, ret = d.GetMigDeviceHandleByIndex(7)
	assert.Equal(t, nvml.ERROR_INVALID_ARGUMENT, ret)

	// Teardown must go compute instance, GPU instance, MIG mode.
	assert.Equal(t, nvml.ERROR_IN_USE, gi3.Destroy())
	_, ret = d.SetMigMode(nvml.DEVICE_MIG_DISABLE)
	assert.Equal(t, nvml.ERROR_IN_USE, ret)
	require.Equal(t, nvml.SUCCESS, ci.Destroy())
	assert.Equal(t, nvml.ERROR_INVALID_ARGUMENT, ci.Destroy())
	_, ret = mig.GetUUID()
	assert.Equal(t, nvml.ERROR_INVALID_ARGUMENT, ret, "the MIG device is gone with its compute instance")
	require.Equal(t, nvml.SUCCESS, gi3.Destroy())
	assert.Equal(t, nvml.ERROR_INVALID_ARGUMENT, gi3.Destroy())
	_, ret = d.GetGpuInstanceById(2)
	assert.Equal(t, nvml.ERROR_NOT_FOUND, ret)
	left, _ = d.GetGpuInstanceRemainingCapacity(&threeG)
	assert.Equal(t, 1, left)
	require.Equal(t, nvml.SUCCESS, gi4.Destroy())
	left, _ = d.GetGpuInstanceRemainingCapacity(&oneG)
	assert.Equal(t, 7, left)
	_, ret = d.SetMigMode(nvml.DEVICE_MIG_DISABLE)
	assert.Equal(t, nvml.SUCCESS, ret)
}

func checkMIGDevice(t *testing.T, s *Server, parent, mig nvml.Device, name string, giID, ciID int, memMiB uint64) {
	t.Helper()
	isMIG, ret := mig.IsMigDeviceHandle()
	require.Equal(t, nvml.SUCCESS, ret)
	assert.True(t, isMIG)
	id, _ := mig.GetUUID()
	assert.True(t, strings.HasPrefix(id, "MIG-"), id)
	byUUID, ret := s.DeviceGetHandleByUUID(id)
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Same(t, mig, byUUID)
	p, _ := mig.GetDeviceHandleFromMigDeviceHandle()
	assert.Same(t, parent, p)
	gotName, _ := mig.GetName()
	assert.Equal(t, name, gotName)
	gotGI, _ := mig.GetGpuInstanceId()
	gotCI, _ := mig.GetComputeInstanceId()
	assert.Equal(t, []int{giID, ciID}, []int{gotGI, gotCI})
	mem, _ := mig.GetMemoryInfo()
	assert.Equal(t, memMiB*mib, mem.Total)
	attrs, ret := mig.GetAttributes()
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Equal(t, memMiB, attrs.MemorySizeMB)
	parentPCI, _ := parent.GetPciInfo()
	pci, _ := mig.GetPciInfo()
	assert.Equal(t, parentPCI, pci)
}

func TestMIGOnA100(t *testing.T) {
	s := newServer(t, "dgx-a100", "n1")
	d := migGPU(t, s, 3)
	oneG := giProfile(t, d, nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	assert.Equal(t, uint32(19), oneG.Id)

	// Seven 1g.5gb fill the compute slices; IDs follow NVML's placement tree.
	var ids []uint32
	for range 7 {
		gi, ret := d.CreateGpuInstance(&oneG)
		require.Equal(t, nvml.SUCCESS, ret)
		info, _ := gi.GetInfo()
		ids = append(ids, info.Id)
		ciInfo := ciProfileInfo(t, gi, nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE)
		_, ret = gi.CreateComputeInstance(&ciInfo)
		require.Equal(t, nvml.SUCCESS, ret)
	}
	assert.Equal(t, []uint32{13, 12, 11, 10, 9, 8, 7}, ids, "highest free placement first, like NVML")
	_, ret := d.CreateGpuInstance(&oneG)
	assert.Equal(t, nvml.ERROR_INSUFFICIENT_RESOURCES, ret)
	me := giProfile(t, d, nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1)
	_, ret = d.CreateGpuInstanceWithPlacement(&me, &nvml.GpuInstancePlacement{Start: 7, Size: 1})
	assert.Equal(t, nvml.ERROR_INVALID_ARGUMENT, ret)

	uuids := map[string]bool{}
	for i := range 7 {
		mig, ret := d.GetMigDeviceHandleByIndex(i)
		require.Equal(t, nvml.SUCCESS, ret)
		checkMIGDevice(t, s, d, mig, "NVIDIA A100-SXM4-40GB MIG 1g.5gb", 7+i, 0, 4864)
		idx, ret := mig.GetIndex()
		require.Equal(t, nvml.SUCCESS, ret)
		assert.Equal(t, i, idx, "a MIG device's index is its GetMigDeviceHandleByIndex index")
		id, _ := mig.GetUUID()
		uuids[id] = true
	}
	assert.Len(t, uuids, 7)

	// Tear one down and recreate it: a new MIG device with a new UUID.
	old, _ := d.GetMigDeviceHandleByIndex(3)
	gi, _ := d.GetGpuInstanceById(10)
	cis, _ := gi.GetComputeInstances(&nvml.ComputeInstanceProfileInfo{Id: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE})
	require.Len(t, cis, 1)
	require.Equal(t, nvml.SUCCESS, cis[0].Destroy())
	require.Equal(t, nvml.SUCCESS, gi.Destroy())
	gi, ret = d.CreateGpuInstanceWithPlacement(&oneG, &nvml.GpuInstancePlacement{Start: 3, Size: 1})
	require.Equal(t, nvml.SUCCESS, ret)
	ciInfo := ciProfileInfo(t, gi, nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE)
	_, ret = gi.CreateComputeInstance(&ciInfo)
	require.Equal(t, nvml.SUCCESS, ret)
	mig, _ := d.GetMigDeviceHandleByIndex(3)
	id, _ := mig.GetUUID()
	assert.False(t, uuids[id])
	_, ret = old.GetIndex()
	assert.Equal(t, nvml.ERROR_INVALID_ARGUMENT, ret, "the destroyed MIG device has no index")
}

func TestComputeInstancesInAFullGPUInstance(t *testing.T) {
	s := newServer(t, "dgx-h100", "n1")
	d := migGPU(t, s, 0)
	sevenG := giProfile(t, d, nvml.GPU_INSTANCE_PROFILE_7_SLICE)
	gi, ret := d.CreateGpuInstance(&sevenG)
	require.Equal(t, nvml.SUCCESS, ret)
	info, _ := gi.GetInfo()
	assert.Equal(t, uint32(0), info.Id)

	want := map[int][][2]uint32{
		nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE: {{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {6, 1}},
		nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE: {{0, 2}, {2, 2}, {4, 2}},
		nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE: {{0, 3}, {4, 3}},
		nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE: {{0, 4}},
		nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE: {{0, 7}},
	}
	for profile, placements := range want {
		ci := ciProfileInfo(t, gi, profile)
		got, ret := gi.GetComputeInstancePossiblePlacements(&ci)
		require.Equal(t, nvml.SUCCESS, ret)
		var pairs [][2]uint32
		for _, pl := range got {
			pairs = append(pairs, [2]uint32{pl.Start, pl.Size})
		}
		assert.Equal(t, placements, pairs, "CI profile %d", profile)
		assert.Equal(t, uint32(len(placements)), ci.InstanceCount)
	}
	_, ret = gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_6_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	assert.Equal(t, nvml.ERROR_NOT_SUPPORTED, ret)

	// A 4c.7g.80gb and a 3c.7g.80gb share the GPU instance.
	c4 := ciProfileInfo(t, gi, nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE)
	c3 := ciProfileInfo(t, gi, nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE)
	c1 := ciProfileInfo(t, gi, nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE)
	assert.Equal(t, uint32(64), c4.MultiprocessorCount)
	_, ret = gi.CreateComputeInstanceWithPlacement(&c3, &nvml.ComputeInstancePlacement{Start: 4, Size: 3})
	require.Equal(t, nvml.SUCCESS, ret)
	_, ret = gi.CreateComputeInstanceWithPlacement(&c1, &nvml.ComputeInstancePlacement{Start: 5, Size: 1})
	assert.Equal(t, nvml.ERROR_INSUFFICIENT_RESOURCES, ret)
	left, _ := gi.GetComputeInstanceRemainingCapacity(&c1)
	assert.Equal(t, 4, left)
	_, ret = gi.CreateComputeInstance(&c4)
	require.Equal(t, nvml.SUCCESS, ret)
	left, _ = gi.GetComputeInstanceRemainingCapacity(&c1)
	assert.Equal(t, 0, left)
	assert.Equal(t, nvml.ERROR_IN_USE, gi.Destroy())

	names := []string{}
	for i := range 2 {
		mig, ret := d.GetMigDeviceHandleByIndex(i)
		require.Equal(t, nvml.SUCCESS, ret)
		name, _ := mig.GetName()
		names = append(names, name)
		attrs, _ := mig.GetAttributes()
		assert.Equal(t, uint32(7), attrs.GpuInstanceSliceCount)
	}
	assert.Equal(t, []string{"NVIDIA H100 80GB HBM3 MIG 3c.7g.80gb", "NVIDIA H100 80GB HBM3 MIG 4c.7g.80gb"}, names)
}

func TestInitialMIGDevices(t *testing.T) {
	p, err := Parse([]byte(header + "gpus: [{model: h200-sxm-141gb, migEnabled: true, migDevices: [3g.71gb, 2g.35gb, 1g.18gb, 1g.18gb]}]\n"))
	require.NoError(t, err)
	s := NewServer(p, "n1")
	require.Equal(t, nvml.SUCCESS, s.Init())
	d, _ := s.DeviceGetHandleByIndex(0)
	var names []string
	for i := 0; ; i++ {
		mig, ret := d.GetMigDeviceHandleByIndex(i)
		if ret == nvml.ERROR_NOT_FOUND {
			break
		}
		require.Equal(t, nvml.SUCCESS, ret)
		name, _ := mig.GetName()
		names = append(names, strings.TrimPrefix(name, "NVIDIA H200 MIG "))
	}
	// Placed from the top like NVML does: 3g at 4 (ID 2), 2g at 2 (ID 4),
	// 1g at 1 and 0 (IDs 8, 7); listed by GPU instance ID: 2, 4, 7, 8.
	assert.Equal(t, []string{"3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb"}, names)
	// Same node, same profile: the same MIG UUIDs after a restart.
	again := NewServer(p, "n1")
	require.Equal(t, nvml.SUCCESS, again.Init())
	d2, _ := again.DeviceGetHandleByIndex(0)
	a, _ := d.GetMigDeviceHandleByIndex(0)
	b, _ := d2.GetMigDeviceHandleByIndex(0)
	ua, _ := a.GetUUID()
	ub, _ := b.GetUUID()
	assert.Equal(t, ua, ub)
}

// TestA100TablesMatchGoNVML cross-checks the A100-40GB catalogue entry with
// the tables NVIDIA ships in go-nvml's dgxa100 mock (which number profiles
// by their NVML index rather than by the unique ID real NVML reports).
func TestA100TablesMatchGoNVML(t *testing.T) {
	models, err := builtinModels()
	require.NoError(t, err)
	mig := models["a100-sxm4-40gb"].MIG
	require.Len(t, mig.GPUInstanceProfiles, len(dgxa100.MIGProfiles.GpuInstanceProfiles))
	for idx, ref := range dgxa100.MIGProfiles.GpuInstanceProfiles {
		p := mig.profileByNVMLIndex(idx)
		require.NotNil(t, p, "NVML profile %d", idx)
		got := p.info()
		got.Id = ref.Id
		assert.Equal(t, ref, got, "NVML profile %d (%s)", idx, p.Name)
		var placements []nvml.GpuInstancePlacement
		for _, start := range p.Placements {
			placements = append(placements, nvml.GpuInstancePlacement{Start: uint32(start), Size: uint32(p.PlacementSize)})
		}
		assert.Equal(t, dgxa100.MIGPlacements.GpuInstancePossiblePlacements[idx], placements, p.Name)
	}
}

// A GPU reset keeps the MIG mode but destroys the GPU's GPU and compute
// instances, as on real GPUs; other GPUs keep theirs.
func TestResetDestroysMIGInstances(t *testing.T) {
	s := newServer(t, "dgx-h100", "n1")
	var gis []nvml.GpuInstance
	for i := 0; i < 2; i++ {
		d := migGPU(t, s, i)
		gi, ret := d.CreateGpuInstance(ptr(giProfile(t, d, nvml.GPU_INSTANCE_PROFILE_1_SLICE)))
		require.Equal(t, nvml.SUCCESS, ret)
		_, ret = gi.CreateComputeInstance(ptr(ciProfileInfo(t, gi, nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE)))
		require.Equal(t, nvml.SUCCESS, ret)
		gis = append(gis, gi)
	}
	d0, _ := s.DeviceGetHandleByIndex(0)
	uuid, _ := d0.GetUUID()
	require.NoError(t, s.Reset(uuid))

	mode, _, ret := d0.GetMigMode()
	require.Equal(t, nvml.SUCCESS, ret)
	require.Equal(t, nvml.DEVICE_MIG_ENABLE, mode, "MIG mode survives a reset")
	n, _ := d0.GetMaxMigDeviceCount()
	for i := 0; i < n; i++ {
		_, ret := d0.GetMigDeviceHandleByIndex(i)
		require.NotEqual(t, nvml.SUCCESS, ret, "no MIG device left on the reset GPU")
	}
	_, ret = gis[0].GetInfo()
	require.Equal(t, nvml.ERROR_INVALID_ARGUMENT, ret, "the GPU instance is gone")
	_, ret = gis[1].GetInfo()
	require.Equal(t, nvml.SUCCESS, ret, "the other GPU keeps its instance")
}

func ptr[T any](v T) *T { return &v }

// TestMIGModeSwitchPerArchitecture: Hopper switches MIG mode at once;
// Ampere keeps the new mode pending until the GPU is reset, also across a
// restart of the simulated library (the state file).
func TestMIGModeSwitchPerArchitecture(t *testing.T) {
	for _, tc := range []struct {
		profile string
		// wantCur, wantPending after SetMigMode(ENABLE); after the reset
		// both are ENABLE.
		wantCur, wantPending int
		wantActivation       nvml.Return
	}{
		{profile: "dgx-h100", wantCur: 1, wantPending: 1, wantActivation: nvml.SUCCESS},
		{profile: "dgx-a100", wantCur: 0, wantPending: 1, wantActivation: nvml.ERROR_IN_USE},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			p, err := Load(tc.profile, nil)
			require.NoError(t, err)
			state := filepath.Join(t.TempDir(), "state.json")
			s := NewServer(p, "n1")
			require.NoError(t, s.PersistTo(state))
			require.Equal(t, nvml.SUCCESS, s.Init())
			d, _ := s.DeviceGetHandleByIndex(0)
			activation, ret := d.SetMigMode(nvml.DEVICE_MIG_ENABLE)
			require.Equal(t, nvml.SUCCESS, ret)
			assert.Equal(t, tc.wantActivation, activation)
			cur, pending, _ := d.GetMigMode()
			assert.Equal(t, []int{tc.wantCur, tc.wantPending}, []int{cur, pending})
			if cur != nvml.DEVICE_MIG_ENABLE {
				info, ret := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_7_SLICE)
				require.Equal(t, nvml.SUCCESS, ret)
				_, ret = d.CreateGpuInstance(&info)
				assert.Equal(t, nvml.ERROR_NOT_SUPPORTED, ret, "no GPU instance while MIG mode is only pending")
			}

			s2 := NewServer(p, "n1")
			require.NoError(t, s2.PersistTo(state))
			require.Equal(t, nvml.SUCCESS, s2.Init())
			d2, _ := s2.DeviceGetHandleByIndex(0)
			cur, pending, _ = d2.GetMigMode()
			assert.Equal(t, []int{tc.wantCur, tc.wantPending}, []int{cur, pending}, "the pending mode is kept in the state file")
			id, _ := d2.GetUUID()
			require.NoError(t, s2.Reset(id))
			cur, pending, _ = d2.GetMigMode()
			assert.Equal(t, []int{1, 1}, []int{cur, pending}, "a reset makes the pending mode current")
		})
	}
}
