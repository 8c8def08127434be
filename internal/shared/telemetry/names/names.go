// Package names holds the names of the GPU telemetry metrics and their
// labels: the one place that knows them, for the plugin that exports them
// (internal/plugin/telemetry) and the tools that read them (internal/cli/status, internal/cli/usage),
// which must not link the NVML bindings.
package names

// Metric names, documented in docs/health-and-telemetry.md (GPU telemetry).
const (
	MetricUtilization    = "gpudra_gpu_utilization_ratio"
	MetricMemoryUsed     = "gpudra_gpu_memory_used_bytes"
	MetricMemoryTotal    = "gpudra_gpu_memory_total_bytes"
	MetricPower          = "gpudra_gpu_power_watts"
	MetricPowerLimit     = "gpudra_gpu_power_limit_watts"
	MetricTemperature    = "gpudra_gpu_temperature_celsius"
	MetricSMClock        = "gpudra_gpu_sm_clock_hertz"
	MetricSMClockMax     = "gpudra_gpu_sm_clock_max_hertz"
	MetricThrottleReason = "gpudra_gpu_throttle_reason_active"
	MetricXIDs           = "gpudra_gpu_xid_errors_total"
	MetricSampleSeconds  = "gpudra_plugin_telemetry_sample_duration_seconds"
)

// Label names of the device series.
const (
	LabelNode           = "node"
	LabelDevice         = "device"
	LabelUUID           = "uuid"
	LabelMIGProfile     = "mig_profile"
	LabelClaimNamespace = "claim_namespace"
	LabelClaimName      = "claim_name"
	LabelPodNamespace   = "pod_namespace"
	LabelPodName        = "pod_name"
)

// DeviceLabels are the labels of every device series, in order.
var DeviceLabels = []string{LabelNode, LabelDevice, LabelUUID, LabelMIGProfile, LabelClaimNamespace, LabelClaimName,
	LabelPodNamespace, LabelPodName}

// FlagMetricsSecure is the plugin's flag that puts /metrics behind a bearer
// token (chart: kubeletPlugin.metrics.authentication). The CLI looks for it
// in a plugin pod's arguments: the API server's pod proxy passes no token
// on, so such a plugin's telemetry cannot be read through it.
const FlagMetricsSecure = "metrics-secure"
