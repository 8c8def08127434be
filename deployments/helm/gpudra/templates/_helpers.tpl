{{/* Names shared by the templates. */}}

{{- define "gpudra.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* <release>-<chart>, or just <release> when it already contains the chart name. */}}
{{- define "gpudra.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "gpudra.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The compatibility mode, checked: "" (gpudra's names) or "nvidia". The chart
passes only this to the programs (--compatibility), which resolve every name
from it once (internal/shared/compat.Resolve). The helpers below are the
chart's one copy of the names it needs itself: the driver name (plugin
directory, RBAC, admission policy, NOTES) and the base DeviceClass names
(DeviceClasses without the controller, NOTES).
*/}}
{{- define "gpudra.compatibility" -}}
{{- $mode := .Values.compatibility | default "" -}}
{{- if not (has $mode (list "" "nvidia")) -}}
{{- fail (printf "compatibility: %q is not supported; use \"nvidia\" or leave it empty" .Values.compatibility) -}}
{{- end -}}
{{- $mode -}}
{{- end -}}

{{/* The DRA driver name of the compatibility mode. */}}
{{- define "gpudra.driverName" -}}
{{- if eq (include "gpudra.compatibility" .) "nvidia" -}}gpu.nvidia.com{{- else -}}gpu.gpudra.io{{- end -}}
{{- end -}}

{{/*
A ComputeDomain name of the mode (compat.Names.ComputeDomain, whose test
compares them): "driver", "channelClass", "daemonClass" or "label".
*/}}
{{- define "gpudra.computeDomainName" -}}
{{- $what := index . 0 -}}{{- $ctx := index . 1 -}}
{{- $domain := ternary "nvidia.com" "gpudra.io" (eq (include "gpudra.compatibility" $ctx) "nvidia") -}}
{{- $names := dict "driver" (printf "compute-domain.%s" $domain) "channelClass" (printf "compute-domain-default-channel.%s" $domain)
  "daemonClass" (printf "compute-domain-daemon.%s" $domain) "label" (printf "resource.%s/computeDomain" $domain) -}}
{{- required (printf "gpudra.computeDomainName: unknown name %q" $what) (get $names $what) -}}
{{- end -}}

{{/* The DeviceClass of a device type ("gpu" or "mig"): <type>.gpudra.io, or <type>.nvidia.com in the NVIDIA mode. */}}
{{- define "gpudra.className" -}}
{{- $type := index . 0 -}}{{- $ctx := index . 1 -}}
{{- if eq (include "gpudra.compatibility" $ctx) "nvidia" -}}{{ $type }}.nvidia.com{{- else -}}{{ $type }}.gpudra.io{{- end -}}
{{- end -}}

{{/*
"true" when any kubelet plugin DaemonSet passes GPUs through
(kubeletPlugin.passthrough, a node group's, or NVIDIA's
featureGates.PassthroughSupport): the controller then keeps the vfio
DeviceClass and admits VfioDeviceConfig.
*/}}
{{- define "gpudra.passthrough" -}}
{{- $on := or .Values.kubeletPlugin.passthrough (and .Values.featureGates .Values.featureGates.PassthroughSupport) -}}
{{- range .Values.kubeletPlugin.nodeGroups -}}
{{- if hasKey . "passthrough" -}}{{- if .passthrough -}}{{- $on = true -}}{{- end -}}{{- end -}}
{{- end -}}
{{- if $on -}}true{{- end -}}
{{- end -}}

{{- define "gpudra.pluginName" -}}{{ include "gpudra.fullname" . }}-kubelet-plugin{{- end -}}
{{/*
"true" when the plugin serves /metrics over HTTPS behind TokenReview and
SubjectAccessReview (kubeletPlugin.metrics.authentication): one chart-wide
setting, since the plugin's ClusterRole and the monitors follow it.
*/}}
{{- define "gpudra.pluginMetricsAuth" -}}
{{- if (.Values.kubeletPlugin.metrics | default dict).authentication -}}
{{- if not .Values.kubeletPlugin.metricsPort -}}
{{- fail "kubeletPlugin.metrics.authentication needs kubeletPlugin.metricsPort: it protects the metrics port" -}}
{{- end -}}
true
{{- end -}}
{{- end -}}
{{/* ServiceAccount and token Secret the chart's monitors scrape with. */}}
{{- define "gpudra.pluginMetricsScraper" -}}{{ include "gpudra.pluginName" . }}-metrics-scraper{{- end -}}
{{/*
Scheme, TLS and credentials of a PodMonitor or ServiceMonitor endpoint when
the plugin's /metrics needs a token: its certificate is self-signed, so it
is not verified; the token is the chart's scraper ServiceAccount's.
*/}}
{{- define "gpudra.pluginMetricsScrapeAuth" -}}
{{- if include "gpudra.pluginMetricsAuth" . -}}
scheme: https
tlsConfig:
  insecureSkipVerify: true
authorization:
  type: Bearer
  credentials:
    name: {{ include "gpudra.pluginMetricsScraper" . }}
    key: token
{{- end }}
{{- end -}}
{{- define "gpudra.controllerName" -}}{{ include "gpudra.fullname" . }}-controller{{- end -}}

{{/* Secret with the webhook's serving certificate. */}}
{{- define "gpudra.certSecretName" -}}
{{- if .Values.controller.certSecretName -}}
{{- .Values.controller.certSecretName -}}
{{- else if eq .Values.controller.certMode "secret" -}}
{{- fail "controller.certMode=secret needs controller.certSecretName: the existing kubernetes.io/tls Secret to serve with" -}}
{{- else -}}
{{- include "gpudra.fullname" . }}-webhook-tls
{{- end -}}
{{- end -}}

{{- define "gpudra.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "gpudra.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpudra
{{- end -}}

{{/* gpudra.labels plus the component; pass (list $ "component"). */}}
{{- define "gpudra.componentLabels" -}}
{{ include "gpudra.labels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* Selector labels; pass (list $ "component"). */}}
{{- define "gpudra.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "gpudra.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "gpudra.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The ServiceAccount user names, as the API server sees them. */}}
{{- define "gpudra.pluginUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "gpudra.pluginName" . }}
{{- end -}}
{{- define "gpudra.controllerUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "gpudra.controllerName" . }}
{{- end -}}

{{/*
"true" when the ComputeDomain controller runs and nudges the kubelets of its
IMEX daemon pods (computeDomains.daemonNudgeAfter is not a zero duration):
then it may patch pods of the release namespace, confined by the -pods
admission policy; empty otherwise.
*/}}
{{- define "gpudra.computeDomainNudge" -}}
{{- $after := toString .Values.computeDomains.daemonNudgeAfter -}}
{{- if and .Values.computeDomains.controller (not (regexMatch "^(0|(0+(\\.0*)?(ns|us|µs|ms|s|m|h))+)$" $after)) -}}
true
{{- end -}}
{{- end -}}

{{- define "gpudra.certModeValid" -}}
{{- if not (has .Values.controller.certMode (list "selfManaged" "certManager" "secret")) -}}
{{- fail (printf "controller.certMode=%q: must be selfManaged, certManager or secret" .Values.controller.certMode) -}}
{{- end -}}
{{- end -}}

{{/* Pod label naming the node group whose DaemonSet runs a plugin pod ("default": none). */}}
{{- define "gpudra.pluginGroupLabel" -}}gpudra.io/kubelet-plugin-group{{- end -}}

{{/* Node label that keeps every plugin DaemonSet off a node when "false". */}}
{{- define "gpudra.pluginDisableLabel" -}}gpudra.io/kubelet-plugin{{- end -}}

{{/*
The driver roots of every plugin DaemonSet, as a CEL list of strings:
nvidiaDriverRoot and each node group's kubeletPlugin.nvidiaDriverRoot.
*/}}
{{- define "gpudra.driverRoots" -}}
{{- $roots := list .Values.nvidiaDriverRoot }}
{{- with .Values.kubeletPlugin.nvidiaDriverRoot }}{{ $roots = append $roots . }}{{ end }}
{{- range .Values.kubeletPlugin.nodeGroups | default list }}
{{- with .nvidiaDriverRoot }}{{ $roots = append $roots . }}{{ end }}
{{- end }}
{{- $roots | uniq | toJson }}
{{- end }}
