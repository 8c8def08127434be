{{- /*
The kubelet plugin of the ComputeDomain channel driver (gpu-kubelet-plugin
compute-domain, internal/plugin/cdplugin), a second container of a plugin
DaemonSet's pod when computeDomains.enabled is set. Pass the dict of
gpudra.pluginDaemonSet plus overlap (rolling updates with --pod-uid).
*/}}
{{- define "gpudra.computeDomainContainer" -}}
{{- $root := .root }}
{{- $p := .values }}
{{- $pluginsDir := printf "%s/plugins" (trimSuffix "/" $root.Values.kubeletRoot) }}
{{- $dataDir := printf "%s/%s" $pluginsDir (include "gpudra.computeDomainName" (list "driver" $root)) }}
{{- $registryDir := printf "%s/plugins_registry" (trimSuffix "/" $root.Values.kubeletRoot) }}
{{- $driverRoot := $p.nvidiaDriverRoot | default $root.Values.nvidiaDriverRoot }}
- name: compute-domain
  image: {{ include "gpudra.image" $root }}
  imagePullPolicy: {{ $root.Values.image.pullPolicy }}
  command: [/usr/local/bin/gpu-kubelet-plugin, compute-domain]
  args:
  - --v={{ $p.logVerbosity }}
  - --kubelet-plugins-directory={{ $pluginsDir }}
  - --kubelet-registrar-directory={{ $registryDir }}
  - --cdi-root={{ $root.Values.cdiRoot }}
  - --nvidia-driver-root=/driver-root
  - --host-driver-root={{ $driverRoot }}
  - --channels={{ $root.Values.computeDomains.channels }}
  {{- with include "gpudra.compatibility" $root }}
  - --compatibility={{ . }}
  {{- end }}
  {{- with $root.Values.computeDomains.healthPort }}
  - --health-address=:{{ . }}
  {{- end }}
  env:
  # The driver's namespace: the only one whose claims may be daemon claims.
  - name: POD_NAMESPACE
    valueFrom:
      fieldRef:
        fieldPath: metadata.namespace
  - name: NODE_NAME
    valueFrom:
      fieldRef:
        fieldPath: spec.nodeName
  {{- if .overlap }}
  - name: POD_UID
    valueFrom:
      fieldRef:
        fieldPath: metadata.uid
  {{- end }}
  {{- with $root.Values.computeDomains.healthPort }}
  ports:
  - name: cd-health
    containerPort: {{ . }}
    protocol: TCP
  # Ready once the kubelet has confirmed the channel driver's registration.
  readinessProbe:
    httpGet:
      path: /readyz
      port: {{ . }}
    periodSeconds: 2
    failureThreshold: 3
  livenessProbe:
    httpGet:
      path: /healthz
      port: {{ . }}
    periodSeconds: 10
    failureThreshold: 6
  {{- end }}
  securityContext:
    runAsUser: 0
    runAsNonRoot: false
    {{- if $p.privileged }}
    # NVML reads the GPUs' fabric (the node's NVLink clique) through
    # /dev/nvidia*, as the GPU plugin's container does.
    privileged: true
    {{- else }}
    privileged: false
    allowPrivilegeEscalation: false
    {{- end }}
    capabilities:
      # IMEX channel device nodes are created with mknod (the kernel driver
      # creates none); only this container gets the capability.
      add: [MKNOD]
  volumeMounts:
  # The channel driver's directory: dra.sock, its checkpoint, and the
  # domains' node lists that daemon containers mount (at the host's path).
  - name: compute-domain-data
    mountPath: {{ $dataDir }}
  - name: plugins-registry
    mountPath: {{ $registryDir }}
  - name: cdi
    mountPath: {{ $root.Values.cdiRoot }}
  # Writable: a driver root with its own dev/ (a containerized or simulated
  # driver) gets the channel device nodes there.
  - name: driver-root
    mountPath: /driver-root
    {{- if $p.privileged }}
    mountPropagation: HostToContainer
    {{- end }}
  # Otherwise they are created in the host's /dev.
  - name: dev
    mountPath: /dev
{{- end -}}

{{/* The volume of the channel driver's directory. */}}
{{- define "gpudra.computeDomainVolume" -}}
{{- $pluginsDir := printf "%s/plugins" (trimSuffix "/" .Values.kubeletRoot) }}
- name: compute-domain-data
  hostPath:
    path: {{ printf "%s/%s" $pluginsDir (include "gpudra.computeDomainName" (list "driver" .)) }}
    type: DirectoryOrCreate
{{- end -}}
