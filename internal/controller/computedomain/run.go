package computedomain

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/api/v1alpha1"
	"github.com/gpudra/gpudra/internal/shared/compat"
)

// Served returns the ComputeDomain resources of the names' groups
// (compat.Names.ComputeDomainVersions) that the API server serves. A group
// that is not served is left out; any other discovery error is returned.
func Served(ctx context.Context, d discovery.DiscoveryInterface, names compat.Names) ([]schema.GroupVersionResource, error) {
	var served []schema.GroupVersionResource
	var errs []error
	for _, gv := range names.ComputeDomainVersions() {
		list, err := d.ServerResourcesForGroupVersion(gv.String())
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("discover %s: %w", gv, err))
			continue
		}
		for _, r := range list.APIResources {
			if r.Name == v1alpha1.ComputeDomainResource {
				served = append(served, gv.WithResource(r.Name))
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return served, nil
}

// Run runs the controller for the ComputeDomain CRDs that are served, until
// ctx is done. It checks discovery every DiscoveryInterval: while no CRD is
// served (computeDomains.installCRDs=false, or NVIDIA's CRD removed) it
// waits without failing, and when the set of served CRDs changes it starts
// the controller again for the new set. It returns nil when ctx is done and
// an error only for a configuration that cannot work.
func Run(ctx context.Context, cfg Config) error {
	cfg.defaults()
	logger := klog.FromContext(ctx)
	var current []schema.GroupVersionResource
	known := false
	for ctx.Err() == nil {
		served, err := Served(ctx, cfg.Client.Discovery(), cfg.Names)
		switch {
		case err != nil:
			logger.Error(err, "Cannot tell which ComputeDomain CRDs are served; checking again", "in", cfg.DiscoveryInterval)
		case len(served) == 0:
			if !known || len(current) > 0 {
				logger.Info("No ComputeDomain CRD is served; the ComputeDomain controller waits for one",
					"groups", cfg.Names.ComputeDomainVersions(), "checkEvery", cfg.DiscoveryInterval)
			}
			current, known = nil, true
			cfg.Metrics.setServed(0)
		default:
			current, known = served, true
			cfg.Metrics.setServed(len(served))
			if err := runWhileServed(ctx, cfg, served); err != nil {
				return err
			}
			continue
		}
		select {
		case <-ctx.Done():
		case <-time.After(cfg.DiscoveryInterval):
		}
	}
	return nil
}

// runWhileServed runs one controller for served until ctx is done or
// discovery reports another set.
func runWhileServed(ctx context.Context, cfg Config, served []schema.GroupVersionResource) error {
	c, err := New(cfg, served)
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		defer cancel()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-time.After(cfg.DiscoveryInterval):
			}
			now, err := Served(runCtx, cfg.Client.Discovery(), cfg.Names)
			if err == nil && !slices.Equal(now, served) {
				klog.FromContext(ctx).Info("The served ComputeDomain CRDs changed; restarting the ComputeDomain controller",
					"before", served, "now", now)
				return
			}
		}
	}()
	if err := c.Run(runCtx); err != nil && runCtx.Err() == nil {
		return err
	}
	return nil
}
