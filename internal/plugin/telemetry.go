package plugin

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/gpudra/gpudra/internal/plugin/checkpoint"
	"github.com/gpudra/gpudra/internal/plugin/telemetry"
)

// TelemetryOptions configure the per-device GPU telemetry of /metrics.
type TelemetryOptions struct {
	// Interval between two samples; 0 turns telemetry off.
	Interval time.Duration
	// WorkloadLabels labels each device's series with the namespace, claim
	// and pods holding it; off, those labels stay empty.
	WorkloadLabels bool
}

func (o *Options) addTelemetryFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.Telemetry.Interval, "telemetry-interval", telemetry.DefaultInterval,
		"How often the GPUs' utilization, memory, power, temperature, clocks and throttle reasons are sampled for /metrics "+
			"(labelled with the claim and pods holding each device); 0 turns it off. Needs --metrics-address.")
	fs.BoolVar(&o.Telemetry.WorkloadLabels, "telemetry-workload-labels", true,
		"Label each device's telemetry with the namespace, claim and pods holding it (claim_namespace, claim_name, "+
			"pod_namespace, pod_name). /metrics is unauthenticated: false keeps tenants' names off it "+
			"(the labels stay, empty; gpudra usage then has no per-pod lines).")
}

func (o *Options) validateTelemetry() error {
	if i := o.Telemetry.Interval; i != 0 && i < time.Second {
		return fmt.Errorf("--telemetry-interval=%s: use 0 (off) or at least 1s (NVML averages utilization over up to a second)", i)
	}
	return nil
}

// telemetryService samples the GPUs for /metrics (internal/plugin/telemetry). A nil
// *telemetryService does nothing.
type telemetryService struct {
	sampler *telemetry.Sampler
	pods    *telemetry.ClaimPods
}

// newTelemetryService returns nil when telemetry is off or has nowhere to
// be served.
func newTelemetryService(o *Options, gpus *GPUNode, store *checkpoint.Store, client kubernetes.Interface) *telemetryService {
	if o.Telemetry.Interval == 0 || o.MetricsAddress == "" {
		return nil
	}
	cfg := telemetry.Config{
		Node: o.NodeName, Lib: gpus.Lib, Devices: telemetry.DevicesOf(gpus.Node),
		Held: (&telemetry.CheckpointHolders{Store: store}).Held, Interval: o.Telemetry.Interval,
		HideWorkloads: !o.Telemetry.WorkloadLabels,
	}
	var pods *telemetry.ClaimPods
	if o.Telemetry.WorkloadLabels {
		// Read the claims' pods only to label with them.
		pods = &telemetry.ClaimPods{Client: client}
		cfg.Pods = pods
	}
	return &telemetryService{sampler: telemetry.New(cfg), pods: pods}
}

func (t *telemetryService) register(reg prometheus.Registerer) error {
	if t == nil {
		return nil
	}
	return t.sampler.Register(reg)
}

// watchXIDs counts the XIDs the health monitor receives per GPU.
func (t *telemetryService) watchXIDs(hs *healthService) {
	if t != nil && hs != nil {
		hs.mon.OnXID(t.sampler.ObserveXID)
	}
}

// run samples in the background group until ctx is done (the plugin
// waits for the group before it shuts NVML down, Plugin.Stop).
func (t *telemetryService) run(ctx context.Context, group *sync.WaitGroup) {
	if t != nil {
		group.Go(func() { t.sampler.Run(ctx) })
	}
}

// observe records the pods of the claims prepared in this call: the first
// answer to which pods a claim's devices serve.
func (t *telemetryService) observe(claims []*resourceapi.ResourceClaim, results map[types.UID]kubeletplugin.PrepareResult) {
	if t == nil || t.pods == nil {
		return
	}
	for _, c := range claims {
		if r, ok := results[c.UID]; ok && r.Err == nil {
			t.pods.Observe(c)
		}
	}
}
