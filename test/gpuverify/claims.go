package gpuverify

import (
	"context"
	"fmt"
	"os"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/gpudra/gpudra/internal/plugin/cdi"
	"github.com/gpudra/gpudra/internal/plugin/checkpoint"
	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/internal/plugin/prepare"
)

// claimNamespace is the namespace of the kit's claims (never sent anywhere).
const claimNamespace = "gpudra-gpu-verify"

// preparer is the Manager and what the checks look at next to it.
type preparer struct {
	m      *prepare.Manager
	writer *cdi.Writer
	store  *checkpoint.Store
	slicer *refusingSlicer
	node   *model.Node // the Manager's: whole GPUs only
	dirs   *tempDirs
}

// claims is steps 2 and 3: a claim per whole GPU and one with all of them,
// each prepared, its CDI spec checked, and unprepared.
func (k *kit) claims(ctx context.Context, node *model.Node) {
	s := k.r.section("2. Prepare and unprepare exclusive whole-GPU claims (internal/plugin/prepare.Manager, the node's CDI edits)")
	cs := k.r.section("3. Generated CDI specs: host paths and injection by the CDI library")
	for _, g := range node.GPUs {
		if g.Partitioning != model.WholeGPU {
			s.info("%s skipped: MIG mode is enabled; MIG devices are not prepared (read-only)", g.DeviceName())
		}
	}
	p := k.newPreparer(ctx, s, node)
	if p == nil {
		cs.info("Skipped: no prepare manager (above).")
		return
	}
	defer k.removeTempDirs(s, p.dirs)
	if len(p.node.GPUs) == 0 {
		s.info("No GPU is published whole: nothing to prepare.")
		cs.info("Skipped: nothing prepared.")
		return
	}
	for _, c := range buildClaims(k.cfg.DriverName, k.cfg.NodeName, p.node) {
		k.exercise(ctx, s, cs, p, c)
	}
	if n := p.slicer.attempts.Load(); n > 0 {
		s.fail("the prepare manager tried to set a time slice %d time(s); it was refused (read-only)", n)
	} else {
		s.pass("no GPU setting was changed: no time slice set, no MPS daemon, no MIG device (none configured)")
	}
	if left, err := os.ReadDir(p.dirs.cdi); err != nil || len(left) > 0 {
		s.fail("CDI directory not empty after all unprepares: %d file(s), %v", len(left), err)
	}
}

// newPreparer builds the Manager as internal/plugin.Start does, over temporary
// directories and the node's real CDI edits; nil when it cannot.
func (k *kit) newPreparer(ctx context.Context, s *Section, node *model.Node) *preparer {
	p := &preparer{slicer: &refusingSlicer{}, node: wholeGPUNode(node)}
	provider, err := k.cfg.Edits(ctx, k.lib, node)
	if !s.check(err, "create the CDI edits provider") {
		return nil
	}
	// Like the plugin: the edits of every GPU of the node, computed once.
	edits, err := cdi.NewCachedEdits(provider, node.GPUs)
	if !s.check(err, fmt.Sprintf("compute the CDI edits of all %d GPU(s)", len(node.GPUs))) {
		return nil
	}
	if common, err := edits.Common(); err == nil {
		s.info("common edits: %s", describeEdits(common))
	}
	if p.dirs, err = makeTempDirs(k.cfg.TempDir); !s.check(err, "create the temporary directories") {
		return nil
	}
	s.info("temporary directory %s (CDI specs, checkpoint, locks)", p.dirs.root)
	ok := false
	defer func() {
		if !ok {
			k.removeTempDirs(s, p.dirs)
		}
	}()
	if p.writer, err = cdi.NewWriter(p.dirs.cdi, edits); !s.check(err, "open the CDI spec directory") {
		return nil
	}
	if p.store, err = checkpoint.Open(checkpoint.Options{Dir: p.dirs.checkpoint}); !s.check(err, "open the checkpoint") {
		return nil
	}
	// No MIG manager, no MPS control, a refusing time slicer: see guard.go.
	p.m, err = prepare.New(prepare.Config{Names: k.names, PoolName: k.cfg.NodeName, Node: p.node,
		Checkpoints: p.store, CDI: p.writer, LockDir: p.dirs.locks, TimeSlicer: p.slicer})
	if !s.check(err, "create the prepare manager (no MIG manager, no MPS, refusing time slicer)") {
		return nil
	}
	if _, err := p.m.Recover(ctx); !s.check(err, "recover (empty checkpoint, as at a first start)") {
		return nil
	}
	ok = true
	return p
}

func (k *kit) removeTempDirs(s *Section, d *tempDirs) {
	if err := os.RemoveAll(d.root); err != nil {
		s.fail("remove the temporary directory %s: %v", d.root, err)
		return
	}
	s.pass("temporary directory %s removed", d.root)
}

// buildClaims returns an exclusive claim for each GPU of node and, with
// more than one GPU, one claim with all of them.
func buildClaims(driver, pool string, node *model.Node) []*resourceapi.ResourceClaim {
	var out []*resourceapi.ResourceClaim
	var all []string
	for _, g := range node.GPUs {
		out = append(out, allocatedClaim("verify-"+g.DeviceName(), driver, pool, "gpu", g.DeviceName()))
		all = append(all, g.DeviceName())
	}
	if len(all) > 1 {
		out = append(out, allocatedClaim("verify-all-gpus", driver, pool, "gpus", all...))
	}
	return out
}

// allocatedClaim is a claim as the scheduler leaves it: one request
// allocated devices of this node's pool, no configuration.
func allocatedClaim(name, driver, pool, request string, devices ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: claimNamespace, Name: name, UID: uuid.NewUUID()},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: request, Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu." + driver, Count: int64(len(devices))},
		}}}},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{}},
	}
	for _, d := range devices {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Request: request, Driver: driver, Pool: pool, Device: d})
	}
	return c
}

// exercise prepares one claim, checks its CDI spec and unprepares it.
func (k *kit) exercise(ctx context.Context, s, cs *Section, p *preparer, c *resourceapi.ResourceClaim) {
	res := &ClaimResult{Name: c.Name, UID: string(c.UID)}
	for _, r := range c.Status.Allocation.Devices.Results {
		res.Devices = append(res.Devices, r.Device)
	}
	k.r.Claims = append(k.r.Claims, res)
	what := fmt.Sprintf("claim %s (%s)", c.Name, strings.Join(res.Devices, ", "))
	if err := guardClaim(c, k.cfg.DriverName, k.cfg.NodeName, p.node); err != nil {
		s.fail("%s: %v", what, err)
		return
	}
	result := p.m.PrepareClaims(ctx, []*resourceapi.ResourceClaim{c})[c.UID]
	res.Prepared = result.Err == nil && checkPrepared(s, what, res, result.Devices)
	if result.Err != nil {
		s.fail("prepare %s: %v", what, result.Err)
	}
	if res.Prepared {
		k.checkSpec(cs, p, res)
	}
	ref := kubeletplugin.NamespacedObject{UID: c.UID, NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}}
	err := p.m.UnprepareClaims(ctx, []kubeletplugin.NamespacedObject{ref})[c.UID]
	if err == nil {
		err = checkUnprepared(p, string(c.UID))
	}
	res.Unprepared = s.check(err, "unprepare "+what+": CDI spec and checkpoint record removed")
}

// checkPrepared checks the devices the prepare returned for the kubelet.
func checkPrepared(s *Section, what string, res *ClaimResult, devs []kubeletplugin.Device) bool {
	var problems []string
	got := map[string]bool{}
	for _, d := range devs {
		got[d.DeviceName] = true
		if len(d.CDIDeviceIDs) != 1 {
			problems = append(problems, fmt.Sprintf("%s has %d CDI device IDs, expected 1", d.DeviceName, len(d.CDIDeviceIDs)))
		}
		res.CDIDeviceIDs = append(res.CDIDeviceIDs, d.CDIDeviceIDs...)
	}
	for _, name := range res.Devices {
		if !got[name] {
			problems = append(problems, name+" missing from the result")
		}
	}
	if len(devs) != len(res.Devices) {
		problems = append(problems, fmt.Sprintf("%d devices returned for %d allocated", len(devs), len(res.Devices)))
	}
	if len(problems) > 0 {
		s.fail("prepare %s: %s", what, strings.Join(problems, "; "))
		return false
	}
	s.pass("prepare %s: CDI devices %s", what, strings.Join(res.CDIDeviceIDs, ", "))
	return true
}

func checkUnprepared(p *preparer, uid string) error {
	has, err := p.writer.HasClaim(uid)
	switch {
	case err != nil:
		return fmt.Errorf("look for the CDI spec %s: %w", p.writer.SpecPath(uid), err)
	case has:
		return fmt.Errorf("CDI spec %s still there", p.writer.SpecPath(uid))
	}
	rec, err := p.store.Get(uid)
	switch {
	case err != nil:
		return fmt.Errorf("read the checkpoint record: %w", err)
	case rec != nil:
		return fmt.Errorf("checkpoint record still there")
	}
	return nil
}
