{{- /*
One plugin DaemonSet. Pass a dict: root (the chart's top scope), values (the
kubeletPlugin values of this DaemonSet: the chart's, or a node group's merged
over them), name (the DaemonSet's name), group (the node group's name, "" for
the default DaemonSet) and exclude (node selector requirements every node of
this DaemonSet must meet besides values.nodeSelector and values.affinity).
*/}}
{{- define "gpudra.pluginDaemonSet" -}}
{{- $root := .root }}
{{- $p := .values }}
{{- $dsName := .name }}
{{- $overlap := gt (int $p.maxSurge) 0 }}
{{- $pluginsDir := printf "%s/plugins" (trimSuffix "/" $root.Values.kubeletRoot) }}
{{- $dataDir := printf "%s/%s" $pluginsDir (include "gpudra.driverName" $root) }}
{{- $registryDir := printf "%s/plugins_registry" (trimSuffix "/" $root.Values.kubeletRoot) }}
{{- $driverRoot := $p.nvidiaDriverRoot | default $root.Values.nvidiaDriverRoot }}
{{- $metricsAuth := include "gpudra.pluginMetricsAuth" $root }}
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: {{ $dsName }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "gpudra.componentLabels" (list $root "kubelet-plugin") | nindent 4 }}
    {{ include "gpudra.pluginGroupLabel" $root }}: {{ .group | default "default" }}
spec:
  selector:
    matchLabels:
      {{- include "gpudra.selectorLabels" (list $root "kubelet-plugin") | nindent 6 }}
      {{- with .group }}
      # A node group's DaemonSet selects its own pods only. (The default
      # DaemonSet's selector is the one of earlier chart versions, which
      # cannot change; it leaves pods that another DaemonSet owns alone.)
      {{ include "gpudra.pluginGroupLabel" $root }}: {{ . }}
      {{- end }}
  # With maxSurge > 0 an upgrade starts the new plugin pod on a node before
  # the old one stops (maxUnavailable 0), so the node always has a plugin to
  # prepare and unprepare claims. For that moment two plugin pods run on the
  # node: each registers with the kubelet under its own pod UID (--pod-uid,
  # the kubelet plugin helper's rolling-update mode), and until the old one is
  # gone the kubelet may call either. With maxSurge 0 the old pod stops first
  # (maxUnavailable 1, no --pod-uid): no overlap, a short gap instead.
  updateStrategy:
    type: RollingUpdate
    rollingUpdate:
      maxSurge: {{ $p.maxSurge }}
      maxUnavailable: {{ ternary 0 1 $overlap }}
  template:
    metadata:
      labels:
        {{- include "gpudra.componentLabels" (list $root "kubelet-plugin") | nindent 8 }}
        {{ include "gpudra.pluginGroupLabel" $root }}: {{ .group | default "default" }}
      {{- with $p.podAnnotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      serviceAccountName: {{ include "gpudra.pluginName" $root }}
      {{- with $p.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      # Stopping cleanly deregisters the plugin; prepared claims survive in
      # the checkpoint either way.
      terminationGracePeriodSeconds: 30
      containers:
      - name: plugin
        image: {{ include "gpudra.image" $root }}
        imagePullPolicy: {{ $root.Values.image.pullPolicy }}
        command: [/usr/local/bin/gpu-kubelet-plugin]
        args:
        - --v={{ $p.logVerbosity }}
        - --kubelet-plugins-directory={{ $pluginsDir }}
        - --kubelet-registrar-directory={{ $registryDir }}
        - --cdi-root={{ $root.Values.cdiRoot }}
        - --mig={{ $p.mig | default "static" }}
        {{- with $p.migProfiles }}
        - --mig-profiles={{ join "," . }}
        {{- end }}
        - --numa-node-attribute={{ $p.numaNodeAttribute | default "scalar" }}
        {{- with $p.consumableShares | default $root.Values.consumableShares | toString }}
        - --consumable-shares={{ . }}
        {{- end }}
        {{- if or $p.passthrough (and $root.Values.featureGates $root.Values.featureGates.PassthroughSupport) }}
        {{- if not $p.privileged }}
        {{- fail "kubeletPlugin.passthrough needs kubeletPlugin.privileged: the plugin writes the GPUs' driver_override, bind and unbind in sysfs" }}
        {{- end }}
        - --passthrough
        {{- end }}
        {{- if or $p.fabricManagerPartitioning (and $root.Values.featureGates $root.Values.featureGates.FabricManagerPartitioning) }}
        - --fabric-manager-partitioning
        {{- end }}
        # NVML and the driver's files are read at /driver-root (the mount
        # below); CDI specs name them as the host sees them.
        - --nvidia-driver-root=/driver-root
        - --host-driver-root={{ $driverRoot }}
        {{- with $p.nvidiaCDIHookPath }}
        - --nvidia-cdi-hook-path={{ . }}
        {{- end }}
        {{- with $p.metricsPort }}
        - --metrics-address=:{{ . }}
        {{- end }}
        {{- if $metricsAuth }}
        - --metrics-secure
        {{- end }}
        - --health-monitoring={{ $p.health.enabled }}
        - --health-ignored-xids={{ $p.health.ignoredXIDs }}
        - --health-probe-interval={{ $p.health.probeInterval }}
        {{- with $p.health.taints }}
        - --health-taints={{ . }}
        {{- end }}
        {{- if hasKey $p "fabricPollInterval" }}
        - --fabric-poll-interval={{ $p.fabricPollInterval }}
        {{- end }}
        - --telemetry-interval={{ $p.telemetry.interval }}
        - --telemetry-workload-labels={{ ne $p.telemetry.workloadLabels false }}
        {{- with include "gpudra.compatibility" $root }}
        - --compatibility={{ . }}
        {{- end }}
        {{- with $p.mpsControlDaemon }}
        {{- if .pod }}
        # A Pod per MPS claim (internal/plugin/mpspod), in this namespace.
        - --mps-daemon=pod
        - --mps-daemon-image={{ include "gpudra.image" $root }}
        - --mps-daemon-image-pull-policy={{ $root.Values.image.pullPolicy }}
        - --mps-daemon-service-account={{ include "gpudra.pluginName" $root }}
        {{- with .resources }}
        - {{ printf "--mps-daemon-resources=%s" (toJson .) | quote }}
        {{- end }}
        {{- with .priorityClassName }}
        - --mps-daemon-priority-class={{ . }}
        {{- end }}
        {{- end }}
        {{- end }}
        # A tmpfs per MPS claim as its /dev/shm; it reaches the host through
        # the plugin directory's Bidirectional propagation (privileged only).
        - --mps-shm-tmpfs={{ $p.privileged }}
        {{- with $p.extraArgs }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
        env:
        # The namespace of the MPS control daemon Pods.
        - name: POD_NAMESPACE
          valueFrom:
            fieldRef:
              fieldPath: metadata.namespace
        # The pool name and the owner of the node's ResourceSlices.
        - name: NODE_NAME
          valueFrom:
            fieldRef:
              fieldPath: spec.nodeName
        {{- if $overlap }}
        # Turns on the rolling-update mode described at updateStrategy.
        - name: POD_UID
          valueFrom:
            fieldRef:
              fieldPath: metadata.uid
        {{- end }}
        {{- with $p.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
        # No readiness probe: the plugin is ready once its sockets are in the
        # kubelet's directories, which an HTTP probe cannot see, and the image
        # has no shell for an exec probe. The kubelet reports the
        # registration itself (plugin_manager) and a plugin that cannot start
        # exits, which the kubelet restarts.
        {{- with $p.metricsPort }}
        ports:
        # /metrics (driver metrics and GPU telemetry), /healthz, /readyz.
        - name: metrics
          containerPort: {{ . }}
          protocol: TCP
        # Ready once the kubelet has confirmed the plugin's registration: a
        # rolling update moves on only when the new pod can prepare claims.
        readinessProbe:
          httpGet:
            path: /readyz
            port: {{ . }}
            {{- if $metricsAuth }}
            # --metrics-secure: the port speaks HTTPS; /readyz needs no token.
            scheme: HTTPS
            {{- end }}
          periodSeconds: 2
          failureThreshold: 3
        livenessProbe:
          httpGet:
            path: /healthz
            port: {{ . }}
            {{- if $metricsAuth }}
            scheme: HTTPS
            {{- end }}
          periodSeconds: 10
          failureThreshold: 6
        {{- end }}
        securityContext:
          # Root: the plugin writes into root-owned host directories (the
          # kubelet's and the container runtime's CDI directory).
          runAsUser: 0
          runAsNonRoot: false
          {{- if $p.privileged }}
          # Privileged: NVML opens /dev/nvidiactl and every GPU's
          # /dev/nvidia<N>, which the device cgroup of an unprivileged
          # container refuses; a pod spec cannot allow single devices.
          privileged: true
          {{- else }}
          # A simulated driver root (values-simulated.yaml) opens no device.
          privileged: false
          allowPrivilegeEscalation: false
          {{- end }}
        {{- with $p.resources }}
        resources:
          {{- toYaml . | nindent 10 }}
        {{- end }}
        volumeMounts:
        # Only the driver's own directory of <kubeletRoot>/plugins (socket and
        # checkpoint), at the host's path: the kubelet dials the socket path the
        # plugin registers.
        - name: plugin-data
          mountPath: {{ $dataDir }}
          {{- if $p.privileged }}
          # The MPS claims' tmpfs mounts (mps/<claim>/shm) must reach the
          # host, where their daemon Pods and containers mount them.
          mountPropagation: Bidirectional
          {{- end }}
        - name: plugins-registry
          mountPath: {{ $registryDir }}
        - name: cdi
          mountPath: {{ $root.Values.cdiRoot }}
        - name: driver-root
          mountPath: /driver-root
          {{- if $p.privileged }}
          readOnly: true
          # The GPU operator's driver container mounts the driver after we start.
          mountPropagation: HostToContainer
          {{- else }}
          # A simulated driver root keeps its simulated GPUs' state in var/lib/gpudra-sim.
          readOnly: false
          {{- end }}
        - name: dev
          mountPath: /dev
      {{- if $root.Values.computeDomains.enabled }}
      {{- include "gpudra.computeDomainContainer" (dict "root" $root "values" $p "overlap" $overlap) | nindent 6 }}
      {{- end }}
      volumes:
      - name: plugin-data
        hostPath:
          path: {{ $dataDir }}
          type: DirectoryOrCreate
      - name: plugins-registry
        hostPath:
          path: {{ $registryDir }}
          type: DirectoryOrCreate
      - name: cdi
        hostPath:
          path: {{ $root.Values.cdiRoot }}
          type: DirectoryOrCreate
      - name: driver-root
        hostPath:
          path: {{ $driverRoot }}
          type: Directory
      - name: dev
        hostPath:
          path: /dev
          type: Directory
      {{- if $root.Values.computeDomains.enabled }}
      {{- include "gpudra.computeDomainVolume" $root | nindent 6 }}
      {{- end }}
      {{- with $p.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- $affinity := deepCopy ($p.affinity | default dict) }}
      {{- if .exclude }}
      {{- /* Every required term of the node affinity (they are ORed) gets
      the exclusions (ANDed within a term); without terms, one term of them. */}}
      {{- $na := get $affinity "nodeAffinity" | default dict }}
      {{- $req := get $na "requiredDuringSchedulingIgnoredDuringExecution" | default dict }}
      {{- $terms := list }}
      {{- range (get $req "nodeSelectorTerms" | default (list dict)) }}
      {{- $terms = append $terms (set (deepCopy .) "matchExpressions" (concat (get . "matchExpressions" | default list) $.exclude)) }}
      {{- end }}
      {{- $_ := set $req "nodeSelectorTerms" $terms }}
      {{- $_ = set $na "requiredDuringSchedulingIgnoredDuringExecution" $req }}
      {{- $_ = set $affinity "nodeAffinity" $na }}
      {{- end }}
      {{- with $affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $p.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end -}}
