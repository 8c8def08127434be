package computedomain

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/shared/atomicfile"
	"github.com/gpudra/gpudra/internal/shared/imex"
)

// Where a daemon container finds what its claim gives it.
const (
	// DaemonConfigDir is the domain's directory of DomainsDir, mounted
	// read-only. The directory, not the file, is mounted: the node list
	// is replaced by a rename, which a file bind mount would not show.
	DaemonConfigDir = "/run/gpudra-imex"
	// NodesConfigFile is the node list in it (imex.NodesConfigEnv).
	NodesConfigFile = "nodes.cfg"
	// DaemonDriverRoot is where the host's driver root is mounted
	// (imex.DriverRootEnv), writable: the daemon writes its
	// configuration under <root>/tmp (imex.WorkDirBase).
	DaemonDriverRoot = "/driver-root"
)

// domainDir is where a domain's node list is written.
func (n *Node) domainDir(uid string) string { return filepath.Join(n.cfg.DomainsDir, uid) }

// prepareDaemon prepares the IMEX daemon pod's claim: it writes the
// domain's node list for this node's clique and gives the container the
// environment and mounts of the imex contract.
func (n *Node) prepareDaemon(ctx context.Context, claim *resourceapi.ResourceClaim, devices []deviceRequest) ([]PreparedDevice, error) {
	if claim.Namespace != n.cfg.DaemonNamespace {
		return nil, fmt.Errorf("claim %s/%s: ComputeDomain daemon claims are served only in the driver's namespace %s "+
			"(a daemon gets the driver root mounted writable); claim IMEX channels with the domain's channel template instead",
			claim.Namespace, claim.Name, n.cfg.DaemonNamespace)
	}
	if len(devices) != 1 {
		return nil, fmt.Errorf("claim %s/%s has %d daemon devices: a daemon claim gets exactly one", claim.Namespace, claim.Name, len(devices))
	}
	if clique, mgmt := n.cliqueAndMgmt(); clique != "" && mgmt == nil {
		return nil, fmt.Errorf("claim %s/%s: this node's GPUs are in NVLink clique %s, but the driver offers no IMEX fabric "+
			"management capability (/proc/%s), which nvidia-imex needs: check the driver's IMEX support", claim.Namespace, claim.Name,
			clique, fabricMgmtCap)
	}
	uid := devices[0].config.DomainID
	cd, err := n.domain(ctx, uid)
	if err != nil {
		return nil, err
	}
	held := PreparedClaim{UID: claim.UID, Kind: TypeDaemon, DomainID: uid, Ready: true}
	if err := n.hold(ctx, held, func(ctx context.Context) error { return n.writeNodes(ctx, cd) }); err != nil {
		return nil, err
	}
	d := devices[0]
	return []PreparedDevice{{Requests: []string{d.result.Request}, Pool: d.result.Pool, Device: d.result.Device, Edits: n.daemonEdits(uid)}}, nil
}

func (n *Node) daemonEdits(uid string) *cdispec.ContainerEdits {
	var nodes []*cdispec.DeviceNode
	if _, mgmt := n.cliqueAndMgmt(); mgmt != nil {
		node := *mgmt
		nodes = append(nodes, &node)
	}
	return &cdispec.ContainerEdits{
		DeviceNodes: nodes,
		Env: []string{
			imex.NodesConfigEnv + "=" + path.Join(DaemonConfigDir, NodesConfigFile),
			imex.DriverRootEnv + "=" + DaemonDriverRoot,
		},
		Mounts: []*cdispec.Mount{
			{HostPath: filepath.Join(n.cfg.HostDomainsDir, uid), ContainerPath: DaemonConfigDir,
				Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec"}},
			// rslave: what the host mounts under the driver root later (a
			// containerized driver's) reaches the daemon, as for MPS daemons.
			{HostPath: n.cfg.HostDriverRoot, ContainerPath: DaemonDriverRoot, Options: []string{"rbind", "rslave", "rw", "nosuid"}},
		},
	}
}

// NodesList is the node list of a domain for a clique: the IP addresses
// of the domain's nodes in that clique, by index (then name), one a line.
// Nodes without an address yet are left out.
func NodesList(cd *v1alpha1.ComputeDomain, cliqueID string) []byte {
	nodes := slices.Clone(cd.Status.Nodes)
	slices.SortFunc(nodes, func(a, b v1alpha1.ComputeDomainNode) int {
		return cmp.Or(cmp.Compare(a.Index, b.Index), cmp.Compare(a.Name, b.Name))
	})
	var b bytes.Buffer
	for _, node := range nodes {
		if node.CliqueID == cliqueID && node.IPAddress != "" {
			b.WriteString(node.IPAddress + "\n")
		}
	}
	return b.Bytes()
}

// SyncNodes rewrites the node list of domain cd if a daemon claim of it is
// prepared here and the list changed; a plugin calls it on every change
// of a ComputeDomain's status. It reports whether it wrote.
func (n *Node) SyncNodes(ctx context.Context, cd *v1alpha1.ComputeDomain) (bool, error) {
	unlock, err := n.cfg.Store.Lock(ctx)
	if err != nil {
		return false, err
	}
	defer unlock()
	if held, err := n.holds(ctx, string(cd.UID), TypeDaemon, ""); err != nil || !held {
		return false, err
	}
	old, err := os.ReadFile(filepath.Join(n.domainDir(string(cd.UID)), NodesConfigFile))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("read the node list of ComputeDomain %s/%s: %w", cd.Namespace, cd.Name, err)
	}
	if err == nil && bytes.Equal(old, NodesList(cd, n.CliqueID())) {
		return false, nil
	}
	return true, n.writeNodes(ctx, cd)
}

// writeNodes replaces the domain's node list atomically (write, rename),
// as the imex contract asks (internal/shared/atomicfile). Called with the
// store's lock held.
func (n *Node) writeNodes(ctx context.Context, cd *v1alpha1.ComputeDomain) error {
	dir := n.domainDir(string(cd.UID))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create the directory of ComputeDomain %s/%s's node list: %w", cd.Namespace, cd.Name, err)
	}
	data := NodesList(cd, n.CliqueID())
	if err := atomicfile.WriteFile(filepath.Join(dir, NodesConfigFile), data, 0o644); err != nil {
		return fmt.Errorf("write the node list of ComputeDomain %s/%s into %s: %w", cd.Namespace, cd.Name, dir, err)
	}
	klog.FromContext(ctx).V(3).Info("Wrote the ComputeDomain's node list", "domain", klog.KObj(cd), "bytes", len(data))
	return nil
}

// hold records claim c in the store, then runs apply (labelling the node,
// writing the node list), all under the store's lock: the record comes
// first, so that a crash in between leaves a claim whose unprepare undoes
// what apply did. If apply fails, the claim's previous record (or none) is
// put back.
func (n *Node) hold(ctx context.Context, c PreparedClaim, apply func(context.Context) error) error {
	unlock, err := n.cfg.Store.Lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	prev, had, err := n.cfg.Store.Claim(ctx, c.UID)
	if err != nil {
		return err
	}
	if had && prev.Kind == c.Kind && prev.DomainID == c.DomainID {
		return apply(ctx) // recorded already (a channel claim may be ready)
	}
	if err := n.cfg.Store.Put(ctx, c); err != nil {
		return err
	}
	if err := apply(ctx); err != nil {
		undo := n.cfg.Store.Remove(ctx, c.UID)
		if had {
			undo = n.cfg.Store.Put(ctx, prev)
		}
		return errors.Join(err, undo)
	}
	return nil
}

// holds tells whether the store holds a claim other than except of the
// kind and domain (for channels: prepared, or labelled the node). Called
// with the store's lock held.
func (n *Node) holds(ctx context.Context, uid, kind string, except types.UID) (bool, error) {
	claims, err := n.cfg.Store.Claims(ctx)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(claims, func(c PreparedClaim) bool {
		return c.UID != except && c.DomainID == uid && c.Kind == kind
	}), nil
}

// Unprepare undoes Prepare of a claim: a channel claim's domain label
// leaves the node with the domain's last channel claim here, a daemon
// claim's node list with the domain's last daemon claim. Channel device
// nodes stay (they are the host's, shared by every claim, and the next
// claim needs them again). Unknown claims are already unprepared. The
// claims that remain are the store's, whichever instance of the plugin
// prepared them; the claim's record goes last, so that a crash before
// leaves the claim to be unprepared again.
func (n *Node) Unprepare(ctx context.Context, claimUID types.UID) error {
	unlock, err := n.cfg.Store.Lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	c, ok, err := n.cfg.Store.Claim(ctx, claimUID)
	if err != nil || !ok {
		return err
	}
	logger := klog.FromContext(ctx).WithValues("claimUID", claimUID, "domainUID", c.DomainID)
	ctx = klog.NewContext(ctx, logger)
	others, err := n.holds(ctx, c.DomainID, c.Kind, claimUID)
	switch {
	case err != nil:
		return err
	case others:
		logger.V(3).Info("Other claims of the ComputeDomain remain on the node", "kind", c.Kind)
	case c.Kind == TypeChannel:
		if err := n.removeLabel(ctx, c.DomainID); err != nil {
			return err // the claim stays, the kubelet retries
		}
	case c.Kind == TypeDaemon:
		if err := os.RemoveAll(n.domainDir(c.DomainID)); err != nil {
			return fmt.Errorf("remove the node list of ComputeDomain %s: %w", c.DomainID, err)
		}
	}
	return n.cfg.Store.Remove(ctx, claimUID)
}
