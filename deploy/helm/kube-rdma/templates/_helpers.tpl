{{/* Names and labels shared by every template. */}}

{{- define "kube-rdma.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kube-rdma.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "kube-rdma.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "kube-rdma.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kube-rdma.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kube-rdma.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The uninstall hook's pods: not the agent's selector labels, so nothing that selects the
agent's pods (its DaemonSet, kubectl rdma, a PodMonitor) selects them. */}}
{{- define "kube-rdma.hookSelectorLabels" -}}
app.kubernetes.io/name: {{ include "kube-rdma.name" . }}-uninstall
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kube-rdma.labels" -}}
{{ include "kube-rdma.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: kube-rdma
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "kube-rdma.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The names of the configured pools, for the checks below. */}}
{{- define "kube-rdma.poolNames" -}}
{{- range .Values.config.pools }}{{ .name }} {{ end -}}
{{- end -}}

{{/* kube-rdma.resource POOL: the extended resource name of a pool. */}}
{{- define "kube-rdma.resource" -}}
{{ .root.Values.config.resourcePrefix }}/{{ .pool }}
{{- end -}}

{{/* kube-rdma.checkPool: fail unless .pool names a configured pool. */}}
{{- define "kube-rdma.checkPool" -}}
{{- if not (has .pool (splitList " " (trim (include "kube-rdma.poolNames" .root)))) -}}
{{- fail (printf "%s: pool %q is not in config.pools (%s)" .field .pool (trim (include "kube-rdma.poolNames" .root))) -}}
{{- end -}}
{{- end -}}

{{/* kube-rdma.isDRAPool POOL: "true" when the pool has frontend dra, else nothing. */}}
{{- define "kube-rdma.isDRAPool" -}}
{{- range .root.Values.config.pools }}{{ if and (eq .name $.pool) (eq (.frontend | default "devicePlugin") "dra") }}true{{ end }}{{ end -}}
{{- end -}}

{{/* kube-rdma.claimStatus: "true" when the daemon writes the DRA claims' network status
(pkg/claimstatus): dra.enabled and dra.claimStatus, the CNI plugin installed in chained mode on a
pool of frontend dra; else nothing. */}}
{{- define "kube-rdma.claimStatus" -}}
{{- $cni := .Values.cni -}}
{{- if and .Values.dra.enabled .Values.dra.claimStatus $cni.install (eq $cni.mode "chained") (include "kube-rdma.isDRAPool" (dict "root" . "pool" $cni.chained.pool)) }}true{{ end -}}
{{- end -}}

{{/* kube-rdma.isGPUAlignedPool: "true" when the pool .pool has binding gpuAligned. */}}
{{- define "kube-rdma.isGPUAlignedPool" -}}
{{- range .root.Values.config.pools }}{{ if and (eq .name $.pool) (eq (.binding | default "") "gpuAligned") }}true{{ end }}{{ end -}}
{{- end -}}

{{/* The DRA driver's kubelet plugin directory (--dra-plugin-dir), a host path. */}}
{{- define "kube-rdma.draPluginDir" -}}
{{ printf "%s/plugins/rdma.kube-rdma.io" (trimSuffix "/" .Values.hostPaths.kubeletDir) }}
{{- end -}}

{{/* The CNI plugin's netconf for chained (standalone) mode, as JSON: resourceName for a
device plugin pool; for a dra pool, draClaimsDir, the records of the claims the daemon prepared
(the CNI runs on the host and reads the host path; the daemon mounts it at the same path). */}}
{{- define "kube-rdma.chainedPlugin" -}}
{{- $c := .Values.cni.chained -}}
{{- $conf := dict "type" "kube-rdma" -}}
{{- if include "kube-rdma.isDRAPool" (dict "root" . "pool" $c.pool) -}}
{{- if not .Values.dra.enabled -}}
{{- fail (printf "cni.chained.pool: pool %q has frontend dra: set dra.enabled, the CNI plugin reads the claims the DRA front end prepares" $c.pool) -}}
{{- end -}}
{{- /* Turns DRA mode on; the node file (kube-rdma.cniNodeArgs) has the same value. */ -}}
{{- $_ := set $conf "draClaimsDir" (include "kube-rdma.draClaimsDir" .) -}}
{{- else -}}
{{- $_ := set $conf "resourceName" (include "kube-rdma.resource" (dict "root" . "pool" $c.pool)) -}}
{{- end -}}
{{- if $c.interfaceNames }}{{ $_ := set $conf "interfaceNames" $c.interfaceNames }}{{ end -}}
{{- if $c.ipam }}{{ $_ := set $conf "ipam" $c.ipam }}{{ end -}}
{{- mustMergeOverwrite $conf (include "kube-rdma.pluginConfig" . | fromJson) | toPrettyJson -}}
{{- end -}}

{{/* The DRA front end's claim records directory. */}}
{{- define "kube-rdma.draClaimsDir" -}}
{{ printf "%s/claims" (include "kube-rdma.draPluginDir" .) }}
{{- end -}}

{{/* cni.pluginConfig, checked: the plugin takes its host paths from the node file that
`kube-rdma install` writes next to the binary (kube-rdma.cniNodeArgs), and refuses a netconf
that names other ones. stateDir, logFile, procRoot and requirePodResources may stay in
pluginConfig: the node file gets the same values. */}}
{{- define "kube-rdma.pluginConfig" -}}
{{- range $k := list "kubeletSocket" "sysfsRoot" "allocDir" "draClaimsDir" -}}
{{- if hasKey $.Values.cni.pluginConfig $k -}}
{{- fail (printf "cni.pluginConfig.%s: host paths are the node's (hostPaths.*, devicePlugin.allocDir), written by the installer, not the netconf's (docs/cni.md)" $k) -}}
{{- end -}}
{{- end -}}
{{- deepCopy .Values.cni.pluginConfig | toJson -}}
{{- end -}}

{{/* The flags with which `kube-rdma install --bin-dir` writes the plugin's node file
(kube-rdma.json next to the binary): its host paths, which no netconf can change. */}}
{{- define "kube-rdma.cniNodeArgs" -}}
{{- $pc := .Values.cni.pluginConfig -}}
- --state-dir={{ $pc.stateDir | default "/var/lib/cni/kube-rdma" }}
- --log-file={{ $pc.logFile | default "" }}
- --kubelet-socket={{ printf "%s/pod-resources/kubelet.sock" (trimSuffix "/" .Values.hostPaths.kubeletDir) }}
- --sysfs-root={{ .Values.hostPaths.sysfsRoot | default "/sys" }}
- --proc-root={{ $pc.procRoot | default "/proc" }}
- --alloc-dir={{ .Values.devicePlugin.allocDir }}
- --dra-claims-dir={{ include "kube-rdma.draClaimsDir" . }}
- --require-pod-resources={{ if hasKey $pc "requirePodResources" }}{{ $pc.requirePodResources }}{{ else }}true{{ end }}
{{- end -}}

{{/* Root (to write sockets, CDI specs and CNI files into root-owned host directories), with
no capability, no privilege escalation and a read-only root file system. */}}
{{- define "kube-rdma.securityContext" -}}
runAsUser: 0
runAsGroup: 0
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* kube-rdma.securityContextNetAdmin: the daemon's with the reclaimer (cni.reclaim), which
restores NICs in the host netns as the CNI plugin's DEL does: CAP_NET_ADMIN and nothing else. */}}
{{- define "kube-rdma.securityContextNetAdmin" -}}
runAsUser: 0
runAsGroup: 0
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
  add: ["NET_ADMIN"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* kube-rdma.metricsAuth: "true" when /metrics and /state need a token, else nothing.
devicePlugin.metricsAuth: on, off, or auto (on unless metricsHost is a loopback IPv4 address,
::1 or localhost; the daemon's --metrics-auth=auto uses the same rule). The daemon is given the
resolved on or off, so its guard and the ClusterRole rules it needs always agree. No status
server: nothing to guard. */}}
{{- define "kube-rdma.metricsAuth" -}}
{{- $dp := .Values.devicePlugin -}}
{{- $host := toString $dp.metricsHost -}}
{{- $loopback := or (regexMatch "^127\\.[0-9]+\\.[0-9]+\\.[0-9]+$" $host) (eq $host "::1") (eq $host "localhost") -}}
{{- if and (gt (int $dp.metricsPort) 0) (or (eq $dp.metricsAuth "on") (and (eq $dp.metricsAuth "auto") (not $loopback))) -}}
true
{{- end -}}
{{- end -}}
