package controller

import (
	"context"
	"fmt"
	"os"

	"github.com/google/uuid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// runElected campaigns for the Lease and runs work for as long as this
// replica leads. When leadership is lost, work's context is cancelled, the
// replica waits for work to return and campaigns again, so the webhook that
// runs beside it is never interrupted. It returns when ctx is done.
func runElected(ctx context.Context, client kubernetes.Interface, opts *Options,
	watchdog *leaderelection.HealthzAdaptor, work func(context.Context)) error {
	logger := klog.FromContext(ctx)
	host, err := os.Hostname()
	if err != nil {
		return fmt.Errorf("leader election identity: %w", err)
	}
	id := host + "_" + uuid.NewString()
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: opts.LeaseName, Namespace: opts.leaseNamespace()},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	logger = logger.WithValues("lease", klog.KRef(opts.leaseNamespace(), opts.LeaseName), "identity", id)
	for {
		done := make(chan struct{})
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			Name:            opts.LeaseName,
			LeaseDuration:   opts.LeaseDuration,
			RenewDeadline:   opts.LeaseRenewDeadline,
			RetryPeriod:     opts.LeaseRetryPeriod,
			ReleaseOnCancel: true,
			WatchDog:        watchdog,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(lctx context.Context) {
					defer close(done)
					logger.Info("Became the leader; starting the DeviceClass and ComputeDomain controllers and certificate rotation")
					work(klog.NewContext(lctx, logger))
				},
				OnStoppedLeading: func() {
					if ctx.Err() == nil {
						logger.Info("Leadership lost; stopping leader-only work and campaigning again")
					}
				},
				OnNewLeader: func(leader string) {
					if leader != id {
						logger.Info("Another replica leads", "leader", leader)
					}
				},
			},
		})
		if err != nil {
			return fmt.Errorf("leader election settings (--leader-elect-*): %w", err)
		}
		if watchdog != nil {
			watchdog.SetLeaderElection(le)
		}
		logger.V(2).Info("Campaigning for leadership")
		le.Run(ctx)
		if ctx.Err() != nil {
			// Run returns without leading only when ctx is done; any
			// leader work has been cancelled along with ctx.
			return nil
		}
		<-done
	}
}
