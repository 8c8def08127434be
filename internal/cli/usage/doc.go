// Package usage records what each pod used of its GPUs over a while, from
// the GPU telemetry of the nodes' plugins (the gpudra_gpu_* metrics of
// internal/plugin/telemetry, read through the API server's pod proxy), and draws it: the
// `gpudra usage` command. It is a quick look without Prometheus; for history
// and alerts use the chart's ServiceMonitor and Grafana dashboard.
package usage
