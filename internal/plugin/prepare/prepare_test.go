package prepare

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/gpudra/gpudra/internal/plugin/cdi"
	"github.com/gpudra/gpudra/internal/plugin/checkpoint"
)

const (
	uidA = "aaaaaaaa-0000-0000-0000-000000000001"
	uidB = "bbbbbbbb-0000-0000-0000-000000000002"
)

func TestPrepareUnprepare(t *testing.T) {
	e := newEnv(t, 4)
	m, _ := e.manager()
	c := gpuClaim(uidA, "one", "gpu-2")

	devs, err := m.Prepare(ctx(t), c)
	require.NoError(t, err)
	require.Len(t, devs, 1)
	require.Equal(t, testPool, devs[0].PoolName)
	require.Equal(t, "gpu-2", devs[0].DeviceName)
	require.Equal(t, []string{"gpu"}, devs[0].Requests)
	require.Equal(t, []string{cdi.DeviceID(uidA, "gpu-2")}, devs[0].CDIDeviceIDs)
	require.FileExists(t, filepath.Join(e.cdiDir, cdi.SpecName(uidA)+".json"))
	rec, err := m.cfg.Checkpoints.Get(uidA)
	require.NoError(t, err)
	require.Equal(t, checkpoint.PrepareCompleted, rec.State)
	require.Equal(t, e.node.GPUs[2].UUID, rec.Devices[0].UUID)

	// Idempotent: the same result again, nothing rewritten.
	info, _ := os.Stat(m.cfg.Checkpoints.Path(uidA))
	again, err := m.Prepare(ctx(t), c)
	require.NoError(t, err)
	require.Equal(t, devs, again)
	info2, _ := os.Stat(m.cfg.Checkpoints.Path(uidA))
	require.Equal(t, info.ModTime(), info2.ModTime())

	require.NoError(t, m.Unprepare(ctx(t), ref(c)))
	require.NoFileExists(t, filepath.Join(e.cdiDir, cdi.SpecName(uidA)+".json"))
	rec, err = m.cfg.Checkpoints.Get(uidA)
	require.NoError(t, err)
	require.Nil(t, rec)
	require.Empty(t, m.holders("gpu-2"))
	// Unprepare of an unknown (or already unprepared) claim succeeds.
	require.NoError(t, m.Unprepare(ctx(t), ref(c)))
	require.NoError(t, m.Unprepare(ctx(t), ref(gpuClaim(uidB, "never", "gpu-0"))))
}

// A repeated prepare returns the recorded result, but a spec that went
// missing meanwhile (removed by hand, or by a cleanup) is written again:
// the kubelet would otherwise start containers with an unknown CDI device.
func TestRepeatedPrepareRecreatesAMissingSpec(t *testing.T) {
	e := newEnv(t, 1)
	m, _ := e.manager()
	c := configured(uidA, "a", []alloc{{request: "gpu", device: "gpu-0"}}, `{"strategy":"MPS"}`)
	devs, err := m.Prepare(ctx(t), c)
	require.NoError(t, err)
	path := m.cfg.CDI.SpecPath(uidA)
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.Remove(path))

	again, err := m.Prepare(ctx(t), c)
	require.NoError(t, err)
	require.Equal(t, devs, again)
	got, err := os.ReadFile(path)
	require.NoError(t, err, "the spec is written again")
	require.JSONEq(t, string(want), string(got))
	require.NoError(t, m.Unprepare(ctx(t), ref(c)))
}

func TestPrepareClaimWithoutOurDevices(t *testing.T) {
	e := newEnv(t, 1)
	m, _ := e.manager()
	c := gpuClaim(uidA, "foreign", "gpu-0")
	c.Status.Allocation.Devices.Results[0].Driver = "other.example.com"
	devs, err := m.Prepare(ctx(t), c)
	require.NoError(t, err)
	require.Empty(t, devs)
}

func TestPrepareErrors(t *testing.T) {
	tests := []struct {
		name    string
		claim   func() *resourceapi.ResourceClaim
		wantErr string
	}{
		{
			name:    "device not on this node",
			claim:   func() *resourceapi.ResourceClaim { return gpuClaim(uidA, "missing", "gpu-9") },
			wantErr: `allocated device "gpu-9" is not a GPU of node node-a`,
		},
		{
			name: "invalid config names the field",
			claim: func() *resourceapi.ResourceClaim {
				return claim(uidA, "badcfg", []alloc{{request: "gpu", device: "gpu-0"}},
					opaque(resourceapi.AllocationConfigSourceClaim,
						`{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"GpuClaimParameters","sharing":{"strategy":"Sometimes"}}`))
			},
			wantErr: "sharing.strategy",
		},
		{
			name: "unallocated claim",
			claim: func() *resourceapi.ResourceClaim {
				c := gpuClaim(uidA, "unalloc", "gpu-0")
				c.Status.Allocation = nil
				return c
			},
			wantErr: "not allocated",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 2)
			m, _ := e.manager()
			_, err := m.Prepare(ctx(t), tc.claim())
			require.ErrorContains(t, err, tc.wantErr)
			// A refused claim leaves nothing behind.
			uids, _ := m.cfg.CDI.ListClaims()
			require.Empty(t, uids)
			rec, _ := m.cfg.Checkpoints.Get(uidA)
			require.Nil(t, rec)
		})
	}
}

func TestExclusiveGPUNeverSharedByTwoClaims(t *testing.T) {
	tests := []struct {
		name     string
		first    []alloc
		second   []alloc
		conflict bool
	}{
		{"exclusive vs exclusive", []alloc{{request: "gpu", device: "gpu-0"}}, []alloc{{request: "gpu", device: "gpu-0"}}, true},
		{"exclusive vs share", []alloc{{request: "gpu", device: "gpu-0"}}, []alloc{{request: "gpu", device: "gpu-0", share: "s1"}}, true},
		{"share vs share", []alloc{{request: "gpu", device: "gpu-0", share: "s1"}}, []alloc{{request: "gpu", device: "gpu-0", share: "s2"}}, false},
		{"admin access next to exclusive", []alloc{{request: "gpu", device: "gpu-0"}}, []alloc{{request: "gpu", device: "gpu-0", admin: true}}, false},
		{"different GPUs", []alloc{{request: "gpu", device: "gpu-0"}}, []alloc{{request: "gpu", device: "gpu-1"}}, false},
		{"overlap in a two-GPU claim", []alloc{{request: "gpu", device: "gpu-1"}},
			[]alloc{{request: "gpu", device: "gpu-0"}, {request: "gpu", device: "gpu-1"}}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 2)
			m, _ := e.manager()
			_, err := m.Prepare(ctx(t), claim(uidA, "first", tc.first))
			require.NoError(t, err)
			_, err = m.Prepare(ctx(t), claim(uidB, "second", tc.second))
			if !tc.conflict {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrConflict)
			require.ErrorContains(t, err, "default/first")
			// The refusal survives a restart: ownership is rebuilt from the checkpoint.
			m2, rep := e.manager()
			require.Equal(t, 1, rep.Restored)
			_, err = m2.Prepare(ctx(t), claim(uidB, "second", tc.second))
			require.ErrorIs(t, err, ErrConflict)
		})
	}
}

func TestConfigReachesCheckpointAndCDI(t *testing.T) {
	e := newEnv(t, 1)
	m, _ := e.manager()
	c := claim(uidA, "ts", []alloc{{request: "gpu", device: "gpu-0"}},
		opaque(resourceapi.AllocationConfigSourceClass, `{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"GpuClaimParameters"}`),
		opaque(resourceapi.AllocationConfigSourceClaim,
			`{"apiVersion":"resource.gpudra.io/v1alpha1","kind":"GpuClaimParameters","sharing":{"strategy":"TimeSlicing","timeSlicing":{"interval":"Long"}}}`))
	_, err := m.Prepare(ctx(t), c)
	require.NoError(t, err)
	spec, err := os.ReadFile(filepath.Join(e.cdiDir, cdi.SpecName(uidA)+".json"))
	require.NoError(t, err)
	require.Contains(t, string(spec), "GPUDRA_SHARING_STRATEGY=TimeSlicing")
	require.Contains(t, string(spec), "GPUDRA_TIMESLICE_INTERVAL=Long")
	rec, err := m.cfg.Checkpoints.Get(uidA)
	require.NoError(t, err)
	require.Contains(t, string(rec.Devices[0].Config), `"TimeSlicing"`)
}

// TestCrashAtEachPhase kills the "process" (a panic) right after each phase
// of prepare and unprepare, restarts (a new Manager over the same disk), and
// checks the node is consistent and the claim can be prepared again.
func TestCrashAtEachPhase(t *testing.T) {
	tests := []struct {
		phase          string
		unprepare      bool
		wantRestored   int
		wantRolledBack int
		wantOrphans    int
	}{
		{phase: phaseStarted, wantRolledBack: 1},
		{phase: phaseCDIWritten, wantRolledBack: 1},
		{phase: phaseCompleted, wantRestored: 1},
		{phase: phaseUnprepareCDIRemoved, unprepare: true, wantRestored: 1},
	}
	for _, tc := range tests {
		t.Run(tc.phase, func(t *testing.T) {
			e := newEnv(t, 2)
			m, _ := e.manager()
			c := gpuClaim(uidA, "crashy", "gpu-1")
			if tc.unprepare {
				_, err := m.Prepare(ctx(t), c)
				require.NoError(t, err)
			}
			crash(t, tc.phase, func() {
				if tc.unprepare {
					_ = m.Unprepare(ctx(t), ref(c))
				} else {
					_, _ = m.Prepare(ctx(t), c)
				}
			})

			m2, rep := e.manager()
			require.Equal(t, tc.wantRestored, rep.Restored, "restored")
			require.Equal(t, tc.wantRolledBack, rep.RolledBack, "rolled back")
			specs, err := m2.cfg.CDI.ListClaims()
			require.NoError(t, err)
			if tc.wantRestored == 1 {
				// A completed claim keeps (or gets back) its spec and its GPU.
				require.Equal(t, []string{uidA}, specs)
				require.Equal(t, []string{uidA}, m2.holders("gpu-1"))
				if tc.unprepare {
					require.Equal(t, 1, rep.SpecsRewritten)
				}
			} else {
				require.Empty(t, specs)
				require.Empty(t, m2.holders("gpu-1"))
			}
			// Whatever happened, the kubelet's retry converges.
			devs, err := m2.Prepare(ctx(t), c)
			require.NoError(t, err)
			require.Equal(t, "gpu-1", devs[0].DeviceName)
			require.NoError(t, m2.Unprepare(ctx(t), ref(c)))
			specs, _ = m2.cfg.CDI.ListClaims()
			require.Empty(t, specs)
		})
	}
}

func crash(t *testing.T, phase string, f func()) {
	t.Helper()
	type crashed struct{}
	testHookAfter = func(p string) {
		if p == phase {
			panic(crashed{})
		}
	}
	defer func() { testHookAfter = nil }()
	func() {
		defer func() {
			r := recover()
			require.IsType(t, crashed{}, r, "expected a crash after %s", phase)
		}()
		f()
	}()
}

func TestRecoverCleansStaleAndOrphans(t *testing.T) {
	e := newEnv(t, 2)
	m, _ := e.manager()
	_, err := m.Prepare(ctx(t), gpuClaim(uidA, "old-boot", "gpu-0"))
	require.NoError(t, err)
	// A spec without any record, e.g. left by a crash between the spec write
	// and a checkpoint write that never reached the disk.
	devs, err := m.cdiDevices(newClaimState(&checkpoint.ClaimRecord{Devices: []checkpoint.Device{{Name: "gpu-1", UUID: e.node.GPUs[1].UUID, Requests: []string{"gpu"}}}}, nil))
	require.NoError(t, err)
	_, err = m.cfg.CDI.WriteClaim(uidB, devs)
	require.NoError(t, err)

	e.bootID = "boot-2" // the node rebooted
	m2, rep := e.manager()
	require.Equal(t, RecoverReport{Stale: 1, OrphanSpecs: 1}, rep)
	specs, _ := m2.cfg.CDI.ListClaims()
	require.Empty(t, specs)
	require.Empty(t, m2.holders("gpu-0"))
}

// A record torn by a power loss belongs to the earlier boot and must not
// keep the plugin from starting after the reboot.
func TestTornRecordOfEarlierBootIsDiscarded(t *testing.T) {
	e := newEnv(t, 1)
	m, _ := e.manager()
	_, err := m.Prepare(ctx(t), gpuClaim(uidA, "x", "gpu-0"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(m.cfg.Checkpoints.Path(uidA), []byte(`{"version":1,"che`), 0o600))
	e.bootID = "boot-2"
	m2, rep := e.manager()
	require.Equal(t, 0, rep.Restored)
	specs, _ := m2.cfg.CDI.ListClaims()
	require.Empty(t, specs, "the orphaned spec of the earlier boot is removed")
	entries, err := os.ReadDir(filepath.Dir(m2.cfg.Checkpoints.Dir()))
	require.NoError(t, err)
	require.Len(t, entries, 1, "only this boot's record directory remains")
}

func TestCorruptCheckpointRefusesToStart(t *testing.T) {
	e := newEnv(t, 1)
	m, _ := e.manager()
	_, err := m.Prepare(ctx(t), gpuClaim(uidA, "x", "gpu-0"))
	require.NoError(t, err)
	path := m.cfg.Checkpoints.Path(uidA)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, data[:len(data)/2], 0o600))

	_, _, err = e.tryManager()
	require.ErrorIs(t, err, ErrCorruptCheckpoint)
	require.ErrorContains(t, err, path)
	require.ErrorContains(t, err, "Recovering a corrupted checkpoint")
	// Nothing was deleted: the record and the GPU's spec are still there.
	require.FileExists(t, path)
	require.FileExists(t, filepath.Join(e.cdiDir, cdi.SpecName(uidA)+".json"))
}

func TestConcurrentPreparesOfDifferentGPUs(t *testing.T) {
	const n = 8
	e := newEnv(t, n)
	m, _ := e.manager()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for round := 0; round < 5; round++ {
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := gpuClaim(fmt.Sprintf("%08d-0000-0000-0000-%012d", round, i), fmt.Sprintf("c%d", i), fmt.Sprintf("gpu-%d", i))
				if _, err := m.Prepare(ctx(t), c); err != nil {
					errs[i] = err
					return
				}
				errs[i] = m.Unprepare(ctx(t), ref(c))
			}()
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs...))
	}
	specs, _ := m.cfg.CDI.ListClaims()
	require.Empty(t, specs)
}

func TestConcurrentClaimsOnOneGPUExactlyOneWins(t *testing.T) {
	e := newEnv(t, 1)
	m, _ := e.manager()
	const n = 8
	var wg sync.WaitGroup
	results := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, results[i] = m.Prepare(ctx(t), gpuClaim(fmt.Sprintf("cccccccc-0000-0000-0000-%012d", i), fmt.Sprintf("c%d", i), "gpu-0"))
		}()
	}
	wg.Wait()
	wins := 0
	for _, err := range results {
		if err == nil {
			wins++
		} else {
			require.ErrorIs(t, err, ErrConflict)
		}
	}
	require.Equal(t, 1, wins)
}

func TestPrepareClaimsBatch(t *testing.T) {
	e := newEnv(t, 8)
	m, _ := e.manager()
	var claims []*resourceapi.ResourceClaim
	for i := 0; i < 8; i++ {
		claims = append(claims, gpuClaim(fmt.Sprintf("dddddddd-0000-0000-0000-%012d", i), fmt.Sprintf("c%d", i), fmt.Sprintf("gpu-%d", i)))
	}
	res := m.PrepareClaims(ctx(t), claims)
	require.Len(t, res, 8)
	for _, c := range claims {
		require.NoError(t, res[c.UID].Err)
		require.Len(t, res[c.UID].Devices, 1)
	}
	refs := make([]kubeletplugin.NamespacedObject, 0, len(claims))
	for _, c := range claims {
		refs = append(refs, ref(c))
	}
	for uid, err := range m.UnprepareClaims(ctx(t), refs) {
		require.NoError(t, err, uid)
	}
}
