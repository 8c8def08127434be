package mig_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/internal/plugin/mig"
	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/test/sim"
)

func server(t *testing.T, profile string) *sim.Server {
	t.Helper()
	p, err := sim.Load(profile, nil)
	require.NoError(t, err)
	s := sim.NewServer(p, "node")
	require.Equal(t, nvml.SUCCESS, s.Init())
	t.Cleanup(func() { _ = s.Shutdown() })
	return s
}

func gpu0(t *testing.T, s *sim.Server) (nvml.Device, string, *model.MIGGeometry) {
	t.Helper()
	dev, ret := s.DeviceGetHandleByIndex(0)
	require.Equal(t, nvml.SUCCESS, ret)
	uuid, _ := dev.GetUUID()
	geo, err := mig.Geometry(dev, s.Profile().GPUs[0].Model.MemoryBytes)
	require.NoError(t, err)
	return dev, uuid, geo
}

// TestGeometryNames: the names derived from NVML's numbers are the ones
// nvidia-smi prints (the simulator's catalogue holds NVIDIA's tables).
func TestGeometryNames(t *testing.T) {
	for _, profile := range []string{"dgx-a100", "dgx-h100", "h200"} {
		t.Run(profile, func(t *testing.T) {
			s := server(t, profile)
			_, _, geo := gpu0(t, s)
			var got, want []string
			for _, p := range geo.Profiles {
				got = append(got, p.Name)
			}
			for _, p := range s.Profile().GPUs[0].Model.MIG.GPUInstanceProfiles {
				want = append(want, p.Name)
			}
			require.ElementsMatch(t, want, got)
			require.Equal(t, 8, geo.MemorySlices)
			require.Equal(t, 7, geo.ComputeSlices)
		})
	}
}

func TestLifecycle(t *testing.T) {
	s := server(t, "dgx-h100")
	dev, uuid, geo := gpu0(t, s)
	m := mig.NewManager(s)
	prof := func(name string) model.MIGProfile {
		i := slices.IndexFunc(geo.Profiles, func(p model.MIGProfile) bool { return p.Name == name })
		require.GreaterOrEqual(t, i, 0, name)
		return geo.Profiles[i]
	}

	insts, err := m.Instances(uuid, geo)
	require.NoError(t, err)
	require.Empty(t, insts, "MIG mode is off")

	a, err := m.Create(uuid, prof("3g.40gb"), 4)
	require.NoError(t, err, "MIG mode is enabled on demand")
	mode, _, _ := dev.GetMigMode()
	require.Equal(t, nvml.DEVICE_MIG_ENABLE, mode)
	require.Regexp(t, "^MIG-", a.UUID)
	b, err := m.Create(uuid, prof("1g.10gb"), 0)
	require.NoError(t, err)
	_, err = m.Create(uuid, prof("2g.20gb"), 4)
	require.ErrorIs(t, err, mig.ErrOccupied, "overlaps the 3g.40gb")

	got, err := s.DeviceGetHandleByUUID(b.UUID)
	require.Equal(t, nvml.SUCCESS, err)
	isMIG, _ := got.IsMigDeviceHandle()
	require.True(t, isMIG)

	insts, err2 := m.Instances(uuid, geo)
	require.NoError(t, err2)
	require.ElementsMatch(t, []mig.Instance{a, b}, insts)

	require.ErrorIs(t, m.ReleaseForWholeGPU(uuid, geo), mig.ErrOccupied)
	require.NoError(t, m.Destroy(a))
	require.NoError(t, m.Destroy(a), "destroying twice is fine")
	require.NoError(t, m.Destroy(b))
	_, ret := s.DeviceGetHandleByUUID(b.UUID)
	require.Equal(t, nvml.ERROR_NOT_FOUND, ret)
	require.NoError(t, m.ReleaseForWholeGPU(uuid, geo))
	mode, _, _ = dev.GetMigMode()
	require.Equal(t, nvml.DEVICE_MIG_DISABLE, mode)
	require.NoError(t, m.Destroy(a), "MIG mode off: nothing to destroy")
}

func TestApply(t *testing.T) {
	geo := &model.MIGGeometry{}
	node := &model.Node{GPUs: []model.GPU{
		{Minor: 0, Architecture: "Ada Lovelace"},                       // L4
		{Minor: 1, Architecture: "Hopper", MIGCapable: true, MIG: geo}, // MIG off
		{Minor: 2, Architecture: "Hopper", MIGCapable: true, MIG: geo, MIGEnabled: true},
		{Minor: 3, Architecture: "Ampere", MIGCapable: true, MIG: geo}, // MIG off: stays whole
		{Minor: 4, Architecture: "Ampere", MIGCapable: true, MIG: geo, MIGEnabled: true},
	}}
	for _, tc := range []struct {
		mode mig.Mode
		want []model.Partitioning
		// whole: which GPUs publish themselves.
		whole []bool
	}{
		{mig.ModeOff, []model.Partitioning{model.WholeGPU, model.WholeGPU, model.WholeGPU, model.WholeGPU, model.WholeGPU},
			[]bool{true, true, true, true, true}},
		{mig.ModeStatic, []model.Partitioning{model.WholeGPU, model.WholeGPU, model.StaticMIG, model.WholeGPU, model.StaticMIG},
			[]bool{true, true, false, true, false}},
		// NVIDIA's DRA driver: an Ampere GPU is dynamic only with MIG
		// already on, and then without its whole device.
		{mig.ModeDynamic, []model.Partitioning{model.WholeGPU, model.DynamicMIG, model.DynamicMIG, model.WholeGPU, model.DynamicMIG},
			[]bool{true, true, true, true, false}},
	} {
		mig.Apply(node, tc.mode)
		for i, g := range node.GPUs {
			require.Equal(t, tc.want[i], g.Partitioning, "mode %s GPU %d", tc.mode, i)
			require.Equal(t, tc.whole[i], g.PublishesWhole(), "mode %s GPU %d publishes itself", tc.mode, i)
		}
	}
	_, err := mig.ParseMode("sometimes")
	require.ErrorContains(t, err, "off, static or dynamic")
}

// TestAmpereMIGMode: through the simulated library, an A100 keeps a new MIG
// mode pending until a GPU reset. Create on an A100 with MIG off fails with
// ErrModePending and creates nothing; with MIG on, MIG devices come and go
// and MIG mode is never turned off (not even pending), as NVIDIA's driver
// never turns it off on Ampere.
func TestAmpereMIGMode(t *testing.T) {
	s := server(t, "dgx-a100")
	dev, uuid, geo := gpu0(t, s)
	m := mig.NewManager(s)
	_, err := m.Create(uuid, profileOf(t, geo, "1g.5gb"), 0)
	require.ErrorIs(t, err, mig.ErrModePending)
	cur, pending, _ := dev.GetMigMode()
	require.Equal(t, []int{nvml.DEVICE_MIG_DISABLE, nvml.DEVICE_MIG_ENABLE}, []int{cur, pending})

	require.NoError(t, s.Reset(uuid)) // the administrator resets the GPU
	a, err := m.Create(uuid, profileOf(t, geo, "1g.5gb"), 0)
	require.NoError(t, err)
	require.NoError(t, m.Destroy(a))
	require.ErrorIs(t, m.ReleaseForWholeGPU(uuid, geo), mig.ErrModePending)
	cur, pending, _ = dev.GetMigMode()
	require.Equal(t, []int{nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE}, []int{cur, pending}, "MIG mode stays on")
}

func TestDevicesOfStaticLayout(t *testing.T) {
	s := server(t, "../slice/testdata/static-mig.yaml")
	dev, _, geo := gpu0(t, s)
	devs, err := mig.Devices(dev, geo)
	require.NoError(t, err)
	var names []string
	for _, d := range devs {
		names = append(names, model.MIGDeviceName(&model.GPU{}, d.Profile, d.ProfileID, d.Start))
	}
	require.ElementsMatch(t, []string{"gpu-0-mig-3g40gb-4", "gpu-0-mig-2g20gb-2", "gpu-0-mig-1g10gb-0", "gpu-0-mig-1g10gb-1"}, names)
}

// TestDestroyChecksIdentity: NVML hands a free GPU instance ID to the next
// instance created, so Destroy only destroys the instance it is given (the
// same profile, placement and MIG device UUID), never whatever has its ID now.
func TestDestroyChecksIdentity(t *testing.T) {
	for _, tc := range []struct {
		name string
		// then creates an instance after the recorded one is destroyed (""
		// leaves the recorded one in place).
		then string
		// edit changes the recorded instance, as a record of another GPU
		// instance would.
		edit    func(*mig.Instance)
		wantErr error
		// gone: the recorded instance is destroyed (or was already).
		gone bool
	}{
		{name: "the instance itself", gone: true},
		{name: "already destroyed", then: "-", gone: true},
		{name: "ID reused by another profile", then: "1g.20gb", wantErr: mig.ErrReplaced},
		{name: "ID reused by a new instance of the profile", then: "2g.20gb", wantErr: mig.ErrReplaced},
		{name: "another placement", edit: func(i *mig.Instance) { i.Start = 4 }, wantErr: mig.ErrReplaced},
		{name: "another MIG device UUID", edit: func(i *mig.Instance) { i.UUID = "MIG-00000000-0000-0000-0000-000000000000" }, wantErr: mig.ErrReplaced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := server(t, "dgx-h100")
			_, uuid, geo := gpu0(t, s)
			m := mig.NewManager(s)
			recorded, err := m.Create(uuid, profileOf(t, geo, "2g.20gb"), 2)
			require.NoError(t, err)
			live := recorded
			if tc.then != "" {
				require.NoError(t, m.Destroy(recorded))
				if tc.then != "-" {
					live, err = m.Create(uuid, profileOf(t, geo, tc.then), 2)
					require.NoError(t, err)
					require.Equal(t, recorded.GIID, live.GIID, "precondition: the ID is reused")
				}
			}
			if tc.edit != nil {
				tc.edit(&recorded)
			}
			err = m.Destroy(recorded)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
			} else {
				require.NoError(t, err)
			}
			insts, err := m.Instances(uuid, geo)
			require.NoError(t, err)
			if tc.gone {
				require.Empty(t, insts)
			} else {
				require.Equal(t, []mig.Instance{live}, insts, "the other instance is left alone")
			}
		})
	}
}

func profileOf(t *testing.T, geo *model.MIGGeometry, name string) model.MIGProfile {
	t.Helper()
	i := slices.IndexFunc(geo.Profiles, func(p model.MIGProfile) bool { return p.Name == name })
	require.GreaterOrEqual(t, i, 0, name)
	return geo.Profiles[i]
}

// TestProfileNames: every NVML profile index variant gets go-nvlib's name
// (pkg/nvlib/device MigProfileInfo.String), so no two profiles of a GPU
// share a name, a device name or a profile attribute.
func TestProfileNames(t *testing.T) {
	const total = 183359 << 20 // a B200
	for _, tc := range []struct {
		idx, slices int
		memMiB      uint64
		want        string
	}{
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE, 1, 22784, "1g.23gb"},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, 1, 22784, "1g.23gb+me"},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, 1, 45568, "1g.45gb"},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_GFX, 1, 22784, "1g.23gb+gfx"},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME, 1, 22784, "1g.23gb-me"},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME, 1, 22784, "1g.23gb+me.all"},
		{nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1, 2, 45568, "2g.45gb+me"},
		{nvml.GPU_INSTANCE_PROFILE_2_SLICE_GFX, 2, 45568, "2g.45gb+gfx"},
		{nvml.GPU_INSTANCE_PROFILE_2_SLICE_NO_ME, 2, 45568, "2g.45gb-me"},
		{nvml.GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME, 2, 45568, "2g.45gb+me.all"},
		{nvml.GPU_INSTANCE_PROFILE_4_SLICE_GFX, 4, 91392, "4g.90gb+gfx"},
		{nvml.GPU_INSTANCE_PROFILE_7_SLICE, 7, 182784, "7g.180gb"},
	} {
		require.Equal(t, tc.want, mig.ProfileName(tc.idx, tc.slices, tc.memMiB, total), "profile index %d", tc.idx)
	}
	for _, profile := range []string{"hgx-b200", "gh200"} {
		t.Run(profile, func(t *testing.T) {
			s := server(t, profile)
			_, _, geo := gpu0(t, s)
			names, devices := map[string]bool{}, map[string]bool{}
			var want []string
			for _, p := range s.Profile().GPUs[0].Model.MIG.GPUInstanceProfiles {
				want = append(want, p.Name)
			}
			for _, p := range geo.Profiles {
				require.False(t, names[p.Name], "profile name %s twice", p.Name)
				names[p.Name] = true
				for _, start := range p.Placements {
					d := model.MIGDeviceName(&model.GPU{}, p.Name, p.ID, start)
					require.False(t, devices[d], "device name %s twice", d)
					devices[d] = true
				}
			}
			require.ElementsMatch(t, want, slices.Collect(maps.Keys(names)))
		})
	}
}
