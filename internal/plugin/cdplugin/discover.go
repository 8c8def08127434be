package cdplugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/klog/v2"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/plugin/computedomain"
	gpudiscovery "github.com/gpudra/gpudra/internal/plugin/discovery"
	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/internal/plugin/nvmllib"
	"github.com/gpudra/gpudra/internal/shared/compat"
)

// waitClique returns the node's NVLink clique (nodeClique), reading NVML
// again every interval while the fabric registration of a GPU has not
// completed: a clique read then would be wrong (none), and one read later
// is final. Meanwhile the health server reports the plugin not ready with
// the GPUs that are waited for, and each change of them is logged. It
// returns when the clique is known, on any other error, or when ctx is done,
// with the GPUs discovered last (for the fabric watch).
func waitClique(ctx context.Context, roots nvmllib.Roots, interval time.Duration, hs *healthServer) (string, []model.GPU, error) {
	logger := klog.FromContext(ctx)
	last := ""
	start := time.Now()
	for {
		clique, gpus, err := nodeClique(ctx, roots)
		if !errors.Is(err, computedomain.ErrFabricPending) {
			if last != "" {
				hs.setWaiting("")
				logger.Info("NVLink fabric registration completed", "waited", time.Since(start).Round(time.Millisecond))
			}
			return clique, gpus, err
		}
		if msg := err.Error(); msg != last {
			logger.Info("Waiting for the NVLink fabric registration of the node's GPUs before publishing any IMEX channel: "+
				"a clique read now would be wrong; if this lasts, check the NVIDIA Fabric Manager (nvidia-fabricmanager) and the NVLink connections",
				"reason", msg, "retryInterval", interval)
			last = msg
			hs.setWaiting(msg)
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", nil, fmt.Errorf("stopped while waiting for the NVLink fabric registration (%s): %w", last, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// nodeClique discovers the node's NVLink clique through NVML, as the GPU
// plugin discovers its GPUs. Without NVML (no driver, or a driver root
// without the library) the node publishes its channels without a clique:
// a ComputeDomain then spans this node alone, and that is logged. A GPU
// whose fabric registration has not completed yields an error wrapping
// computedomain.ErrFabricPending, one whose registration failed an error.
// It also returns the GPUs it discovered (none without NVML).
func nodeClique(ctx context.Context, roots nvmllib.Roots) (string, []model.GPU, error) {
	logger := klog.FromContext(ctx)
	lib, release, err := openNVML(roots.Driver)
	if err != nil {
		logger.Error(err, "NVML is unavailable: publishing IMEX channels without a cliqueID (no multi-node NVLink domain can include this node)",
			"driverRoot", roots.Driver)
		return "", nil, nil
	}
	defer release(ctx)
	node, err := gpudiscovery.Discover(ctx, lib, gpudiscovery.Options{SysfsRoot: roots.Sys})
	if err != nil {
		logger.Error(err, "GPU discovery failed: publishing IMEX channels without a cliqueID")
		return "", nil, nil
	}
	clique, err := computedomain.NodeClique(node.GPUs)
	if errors.Is(err, computedomain.ErrFabricPending) {
		return "", node.GPUs, fmt.Errorf("NVLink clique of node GPUs under driver root %s: %w", roots.Driver, err)
	}
	if err != nil {
		return "", node.GPUs, fmt.Errorf("NVLink clique of node GPUs under driver root %s: %w; then restart the plugin", roots.Driver, err)
	}
	logger.Info("Discovered the node's NVLink clique", "cliqueID", clique, "gpus", len(node.GPUs))
	return clique, node.GPUs, nil
}

// sharedNVML is the NVML library the plugin instances of this process
// have opened, per driver root: the start's clique reads and the fabric
// watch share one. go-nvml keeps process-wide state that each library's
// first Init and last Shutdown rewrite, so two libraries opened and closed
// concurrently (two instances of a rolling update in one test process)
// race; one library, opened once and shut down by its last user, does not.
var sharedNVML = struct {
	sync.Mutex
	libs map[string]*openedNVML
}{libs: map[string]*openedNVML{}}

type openedNVML struct {
	lib  nvml.Interface
	refs int
}

// openNVML returns the process's NVML library under driverRoot, opening
// it when no one holds it; release gives it back (the last release shuts
// it down).
func openNVML(driverRoot string) (nvml.Interface, func(context.Context), error) {
	sharedNVML.Lock()
	defer sharedNVML.Unlock()
	o := sharedNVML.libs[driverRoot]
	if o == nil {
		lib, err := nvmllib.New(driverRoot)
		if err != nil {
			return nil, nil, err
		}
		o = &openedNVML{lib: lib}
		sharedNVML.libs[driverRoot] = o
	}
	o.refs++
	var once sync.Once
	return o.lib, func(ctx context.Context) {
		once.Do(func() {
			sharedNVML.Lock()
			defer sharedNVML.Unlock()
			if o.refs--; o.refs > 0 {
				return
			}
			delete(sharedNVML.libs, driverRoot)
			if ret := o.lib.Shutdown(); ret != nvml.SUCCESS {
				klog.FromContext(ctx).Error(ret, "NVML shutdown failed")
			}
		})
	}, nil
}

// fabricMgmt reads the driver's fabric-imex-mgmt capability of a node in a
// clique; without it, daemon claims are refused (the library says why).
func fabricMgmt(ctx context.Context, roots nvmllib.Roots, clique string) *cdispec.DeviceNode {
	if clique == "" {
		return nil
	}
	node, err := computedomain.ReadFabricMgmt(roots.Proc, roots.HostDev)
	if err != nil {
		msg := "Cannot read the driver's IMEX fabric management capability: IMEX daemon claims on this node will fail"
		if errors.Is(err, fs.ErrNotExist) {
			msg = "The driver offers no IMEX fabric management capability: IMEX daemon claims on this node will fail"
		}
		klog.FromContext(ctx).Error(err, msg, "cliqueID", clique)
		return nil
	}
	return node
}

// served returns the ComputeDomain group versions of names that the API
// server serves (the controller's computedomain.Served; not imported, to
// keep the controller's dependencies out of the kubelet plugin).
func served(ctx context.Context, d discovery.DiscoveryInterface, names compat.Names) ([]schema.GroupVersionResource, error) {
	var out []schema.GroupVersionResource
	for _, gv := range names.ComputeDomainVersions() {
		list, err := d.ServerResourcesForGroupVersion(gv.String())
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("discover %s: %w", gv, err)
		}
		for _, r := range list.APIResources {
			if r.Name == v1alpha1.ComputeDomainResource {
				out = append(out, gv.WithResource(r.Name))
			}
		}
	}
	if len(out) == 0 {
		klog.FromContext(ctx).Info("No ComputeDomain CRD is served: every channel claim fails until the CRDs are installed and the plugin restarts",
			"groupVersions", names.ComputeDomainVersions())
	}
	return out, nil
}
