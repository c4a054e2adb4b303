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
{{- $_ := set $conf "draClaimsDir" (printf "%s/claims" (include "kube-rdma.draPluginDir" .)) -}}
{{- else -}}
{{- $_ := set $conf "resourceName" (include "kube-rdma.resource" (dict "root" . "pool" $c.pool)) -}}
{{- $_ := set $conf "kubeletSocket" (printf "%s/pod-resources/kubelet.sock" .Values.hostPaths.kubeletDir) -}}
{{- /* A gpuAligned pool's CNI fills the allocation directories the daemon makes. */ -}}
{{- if include "kube-rdma.isGPUAlignedPool" (dict "root" . "pool" $c.pool) }}{{ $_ := set $conf "allocDir" .Values.devicePlugin.allocDir }}{{ end -}}
{{- end -}}
{{- if $c.interfaceNames }}{{ $_ := set $conf "interfaceNames" $c.interfaceNames }}{{ end -}}
{{- if $c.ipam }}{{ $_ := set $conf "ipam" $c.ipam }}{{ end -}}
{{- if .Values.hostPaths.sysfsRoot }}{{ $_ := set $conf "sysfsRoot" .Values.hostPaths.sysfsRoot }}{{ end -}}
{{- mustMergeOverwrite $conf (deepCopy .Values.cni.pluginConfig) | toPrettyJson -}}
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
