package computedomain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/shared/compat"
)

// DomainGetter finds a ComputeDomain of either group by its UID (the
// claims name domains by UID only). A plugin serves it from an informer
// with a UID index; tests from a map. A domain that does not exist is an
// error for which apierrors.IsNotFound is true.
type DomainGetter interface {
	GetDomain(ctx context.Context, uid string) (*v1alpha1.ComputeDomain, error)
}

// ErrDaemonNotReady is wrapped by Prepare's error while the domain's IMEX
// daemon on this node is not ready: the kubelet retries the prepare (and
// the pod waits in ContainerCreating) until it is.
var ErrDaemonNotReady = errors.New("the ComputeDomain's IMEX daemon on this node is not ready")

// ErrCliqueConflict is wrapped by Prepare's error when the domain's status
// already lists nodes of another NVLink clique than this node's: IMEX
// cannot join GPUs that NVLink does not connect, so one domain never spans
// two cliques. The prepare is retried; it succeeds once those nodes left.
var ErrCliqueConflict = errors.New("the ComputeDomain already has nodes in another NVLink clique")

// Config of Node.
type Config struct {
	// NodeName is this node: the pool of its devices, the node labelled
	// into domains, its entry in a domain's status.
	NodeName string
	Names    compat.ComputeDomainNames
	Client   kubernetes.Interface
	Domains  DomainGetter
	// Channels creates the channel device nodes.
	Channels *Channels
	// ChannelCount is how many channels the node publishes, all of which
	// a claim of allocationMode All gets.
	ChannelCount int
	// CliqueID is this node's NVLink clique (empty: none): a daemon's node
	// list names the domain's nodes of this clique.
	CliqueID string
	// DaemonNamespace is the driver's namespace, the only one whose claims
	// may be daemon claims: a daemon gets the driver root mounted writable.
	DaemonNamespace string
	// DomainsDir is where the per-domain node lists are written
	// (<DomainsDir>/<uid>/nodes.cfg), as this process sees it;
	// HostDomainsDir the same directory as the host sees it.
	DomainsDir, HostDomainsDir string
	// HostDriverRoot is the driver root as the host sees it, mounted into
	// daemon containers at DaemonDriverRoot.
	HostDriverRoot string
	// FabricMgmt is the device node of the driver's fabric-imex-mgmt
	// capability (ReadFabricMgmt), given to daemon containers; nil where
	// the driver has none. A node with a CliqueID needs it.
	FabricMgmt *cdispec.DeviceNode
	// ReadyWait is how long Prepare waits in-process for the daemon to
	// become ready before it returns ErrDaemonNotReady (0: it does not
	// wait); ReadyPoll how often it looks meanwhile (default 1s).
	ReadyWait, ReadyPoll time.Duration
	// Store holds the prepared claims (nil: a MemoryStore). A plugin
	// passes its records on disk, which every instance of the node
	// shares.
	Store Store
}

// PreparedDevice is one device of a prepared claim and the CDI edits a
// container using it gets.
type PreparedDevice struct {
	Requests []string
	Pool     string
	Device   string
	Edits    *cdispec.ContainerEdits
}

// PreparedClaim is what Node records of a claim in its Store until the
// claim is unprepared.
type PreparedClaim struct {
	UID      types.UID
	Kind     string // channel or daemon
	DomainID string
	// Ready is false for a channel claim that labelled the node but whose
	// daemon was not ready yet: it still holds the label.
	Ready bool
}

// Node prepares and unprepares the claims of the channel driver on one node.
// It keeps no claims itself: they are in cfg.Store, whose lock orders each
// change of a domain's label or node list with the claims that hold it.
type Node struct {
	cfg Config
	// clique guards cfg.CliqueID and cfg.FabricMgmt, which SetClique
	// changes while claims are prepared.
	clique sync.RWMutex
}

// SetClique replaces the node's NVLink clique and the fabric management
// capability its daemons get (the channel plugin's fabric watch, after the
// fabric manager placed the GPUs in another clique). Claims prepared from
// now on see the new clique: a channel claim of a domain whose other nodes
// are in the old one is refused (ErrCliqueConflict), a daemon's node list
// names the domain's nodes of the new clique when it is written next.
func (n *Node) SetClique(cliqueID string, fabricMgmt *cdispec.DeviceNode) {
	n.clique.Lock()
	defer n.clique.Unlock()
	n.cfg.CliqueID, n.cfg.FabricMgmt = cliqueID, fabricMgmt
}

// CliqueID is the node's NVLink clique (empty: none).
func (n *Node) CliqueID() string {
	id, _ := n.cliqueAndMgmt()
	return id
}

func (n *Node) cliqueAndMgmt() (string, *cdispec.DeviceNode) {
	n.clique.RLock()
	defer n.clique.RUnlock()
	return n.cfg.CliqueID, n.cfg.FabricMgmt
}

// NewNode checks cfg and returns a Node whose claims are cfg.Store's.
func NewNode(cfg Config) (*Node, error) {
	switch {
	case cfg.NodeName == "":
		return nil, errors.New("compute domain node side: no node name: set the plugin's --node-name ($NODE_NAME)")
	case cfg.Client == nil || cfg.Domains == nil || cfg.Channels == nil:
		return nil, errors.New("compute domain node side: a Kubernetes client, a ComputeDomain source and the channels are required")
	case cfg.Names.Driver == "" || cfg.Names.Label == "":
		return nil, errors.New("compute domain node side: no driver name or node label (compat.Names.ComputeDomain)")
	case cfg.DomainsDir == "" || cfg.DaemonNamespace == "":
		return nil, errors.New("compute domain node side: no directory for the domains' node lists or no driver namespace")
	}
	if _, err := (DeviceOptions{Channels: cfg.ChannelCount}).channels(); err != nil {
		return nil, err
	}
	if cfg.ChannelCount == 0 {
		cfg.ChannelCount = DefaultChannels
	}
	if cfg.HostDomainsDir == "" {
		cfg.HostDomainsDir = cfg.DomainsDir
	}
	if cfg.HostDriverRoot == "" {
		cfg.HostDriverRoot = "/"
	}
	if cfg.ReadyPoll <= 0 {
		cfg.ReadyPoll = time.Second
	}
	if cfg.Store == nil {
		cfg.Store = &MemoryStore{}
	}
	return &Node{cfg: cfg}, nil
}

// Prepared returns the claims the node holds (its Store's), sorted by UID.
func (n *Node) Prepared(ctx context.Context) ([]PreparedClaim, error) {
	return n.cfg.Store.Claims(ctx)
}

// Prepare prepares one allocated claim of the channel driver: a channel
// claim (the workload's) or a daemon claim (the IMEX daemon pod's).
func (n *Node) Prepare(ctx context.Context, claim *resourceapi.ResourceClaim) ([]PreparedDevice, error) {
	devices, err := claimDevices(n.cfg.Names, n.cfg.NodeName, n.cfg.ChannelCount, claim)
	if err != nil {
		return nil, err
	}
	logger := klog.FromContext(ctx).WithValues("claim", klog.KObj(claim), "domainUID", devices[0].config.DomainID)
	ctx = klog.NewContext(ctx, logger)
	if devices[0].kind == kindDaemon {
		return n.prepareDaemon(ctx, claim, devices)
	}
	return n.prepareChannels(ctx, claim, devices)
}

func (n *Node) prepareChannels(ctx context.Context, claim *resourceapi.ResourceClaim, devices []deviceRequest) ([]PreparedDevice, error) {
	uid := devices[0].config.DomainID
	cd, err := n.domain(ctx, uid)
	if err != nil {
		return nil, err
	}
	if cd.Namespace != claim.Namespace {
		return nil, fmt.Errorf("claim %s/%s names ComputeDomain %s/%s of another namespace: a pod may use only the channels "+
			"of a ComputeDomain in its own namespace", claim.Namespace, claim.Name, cd.Namespace, cd.Name)
	}
	held := PreparedClaim{UID: claim.UID, Kind: TypeChannel, DomainID: uid}
	if err := n.hold(ctx, held, func(ctx context.Context) error { return n.addLabel(ctx, uid) }); err != nil {
		return nil, err
	}
	if err := n.waitReady(ctx, cd); err != nil {
		return nil, err
	}
	var out []PreparedDevice
	for _, d := range devices {
		ids := []int{d.channel}
		if v1alpha1.ChannelAllocationMode(d.config.AllocationMode) == v1alpha1.AllChannels {
			ids = AllChannels(n.cfg.ChannelCount)
		}
		edits, err := n.cfg.Channels.Edits(ctx, ids)
		if err != nil {
			return nil, err
		}
		out = append(out, PreparedDevice{Requests: []string{d.result.Request}, Pool: d.result.Pool, Device: d.result.Device, Edits: edits})
	}
	if err := n.markReady(ctx, claim); err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(2).Info("Prepared IMEX channels", "devices", len(out))
	return out, nil
}

// markReady records the channel claim as ready, under the store's lock.
func (n *Node) markReady(ctx context.Context, claim *resourceapi.ResourceClaim) error {
	unlock, err := n.cfg.Store.Lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	c, ok, err := n.cfg.Store.Claim(ctx, claim.UID)
	switch {
	case err != nil:
		return err
	case !ok:
		// An Unprepare of this claim (through this or another instance of
		// the plugin) ran meanwhile and may have taken the label away:
		// do not report the claim prepared.
		return fmt.Errorf("claim %s/%s was unprepared while it was being prepared", claim.Namespace, claim.Name)
	case c.Ready:
		return nil
	}
	c.Ready = true
	return n.cfg.Store.Put(ctx, c)
}

// domain returns the domain of uid, with an error that says what to do
// when it is gone.
func (n *Node) domain(ctx context.Context, uid string) (*v1alpha1.ComputeDomain, error) {
	cd, err := n.cfg.Domains.GetDomain(ctx, uid)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("ComputeDomain with UID %s not found: if it was just created, the prepare is retried once this "+
			"node has seen it; if it was deleted, delete the pod and create it again from a live ComputeDomain's template: %w", uid, err)
	}
	if err != nil {
		return nil, fmt.Errorf("get ComputeDomain with UID %s: %w", uid, err)
	}
	return cd, nil
}

// waitReady returns nil once this node's entry of the domain's status is
// Ready (the controller sets it from the readiness of the domain's daemon
// pod here), waiting up to ReadyWait.
func (n *Node) waitReady(ctx context.Context, cd *v1alpha1.ComputeDomain) error {
	var deadline time.Time
	if n.cfg.ReadyWait > 0 {
		deadline = time.Now().Add(n.cfg.ReadyWait)
	}
	for {
		if err := n.cliqueConflict(cd); err != nil {
			return err
		}
		state := n.nodeState(cd)
		if state == v1alpha1.DomainReady {
			return nil
		}
		if deadline.IsZero() || time.Now().After(deadline) {
			if state == "" {
				state = "not in the domain's status yet"
			}
			return fmt.Errorf("ComputeDomain %s/%s: %w (node %s: %s): the node is labelled %s=%s so that the daemon starts; "+
				"the pod's prepare is retried until the daemon is ready (see the domain's daemon pod on this node if this lasts)",
				cd.Namespace, cd.Name, ErrDaemonNotReady, n.cfg.NodeName, state, n.cfg.Names.Label, cd.UID)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ComputeDomain %s/%s: %w: %w", cd.Namespace, cd.Name, ErrDaemonNotReady, ctx.Err())
		case <-time.After(n.cfg.ReadyPoll):
		}
		fresh, err := n.domain(ctx, string(cd.UID))
		if err != nil {
			return err
		}
		cd = fresh
	}
}

// cliqueConflict returns an error wrapping ErrCliqueConflict when the
// domain's status lists another node whose clique is not this node's (a
// node without a clique counts as a clique of its own).
func (n *Node) cliqueConflict(cd *v1alpha1.ComputeDomain) error {
	var others []string
	clique := n.CliqueID()
	for _, node := range cd.Status.Nodes {
		if node.Name != n.cfg.NodeName && node.CliqueID != clique {
			others = append(others, fmt.Sprintf("%s (clique %q)", node.Name, node.CliqueID))
		}
	}
	if len(others) == 0 {
		return nil
	}
	return fmt.Errorf("ComputeDomain %s/%s: %w: node %s is in clique %q, the domain has %s; NVLink does not connect them, "+
		"so one domain's pods must run on nodes of one clique: constrain the workload's pods (e.g. node affinity or a "+
		"topology spread on the nodes' clique) and delete this pod; its prepare is retried meanwhile",
		cd.Namespace, cd.Name, ErrCliqueConflict, n.cfg.NodeName, clique, strings.Join(others, ", "))
}

func (n *Node) nodeState(cd *v1alpha1.ComputeDomain) v1alpha1.ComputeDomainState {
	for _, node := range cd.Status.Nodes {
		if node.Name == n.cfg.NodeName {
			if node.Status == "" {
				return v1alpha1.DomainNotReady
			}
			return node.Status
		}
	}
	return ""
}

// addLabel puts this node into domain uid. A node serves one domain at a
// time: a label of another domain is an error. The patch carries the
// resourceVersion read, so that two domains labelling at once cannot both
// win. Called with the store's lock held.
func (n *Node) addLabel(ctx context.Context, uid string) error {
	node, err := n.cfg.Client.CoreV1().Nodes().Get(ctx, n.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read node %s to label it into ComputeDomain %s: %w", n.cfg.NodeName, uid, err)
	}
	switch cur, ok := node.Labels[n.cfg.Names.Label]; {
	case ok && cur == uid:
		return nil
	case ok:
		return fmt.Errorf("node %s already belongs to ComputeDomain %s (label %s): a node serves one ComputeDomain at a time; "+
			"the pod can start here once that domain's pods on this node are gone", n.cfg.NodeName, cur, n.cfg.Names.Label)
	}
	if err := n.patchLabel(ctx, node.ResourceVersion, &uid); err != nil {
		return fmt.Errorf("label node %s with %s=%s: %w", n.cfg.NodeName, n.cfg.Names.Label, uid, err)
	}
	klog.FromContext(ctx).V(2).Info("Labelled the node into the ComputeDomain", "label", n.cfg.Names.Label)
	return nil
}

// removeLabel takes the node out of domain uid unless its label names
// another domain. Called with the store's lock held.
func (n *Node) removeLabel(ctx context.Context, uid string) error {
	node, err := n.cfg.Client.CoreV1().Nodes().Get(ctx, n.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read node %s to remove its ComputeDomain label: %w", n.cfg.NodeName, err)
	}
	if cur, ok := node.Labels[n.cfg.Names.Label]; !ok || cur != uid {
		return nil
	}
	if err := n.patchLabel(ctx, node.ResourceVersion, nil); err != nil {
		return fmt.Errorf("remove label %s from node %s: %w", n.cfg.Names.Label, n.cfg.NodeName, err)
	}
	klog.FromContext(ctx).V(2).Info("Removed the node from the ComputeDomain", "label", n.cfg.Names.Label)
	return nil
}

func (n *Node) patchLabel(ctx context.Context, resourceVersion string, value *string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels": map[string]any{n.cfg.Names.Label: value}, "resourceVersion": resourceVersion}})
	if err != nil {
		return err
	}
	_, err = n.cfg.Client.CoreV1().Nodes().Patch(ctx, n.cfg.NodeName, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}
