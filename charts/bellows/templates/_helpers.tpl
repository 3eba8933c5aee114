{{/* Chart name, truncated to a DNS label. */}}
{{- define "bellows.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of the release's objects. */}}
{{- define "bellows.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The operator's objects: <fullname>-operator. */}}
{{- define "bellows.operatorName" -}}
{{- printf "%s-operator" (include "bellows.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "bellows.selectorLabels" -}}
app.kubernetes.io/name: {{ include "bellows.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "bellows.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "bellows.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: bellows
{{- end }}

{{- define "bellows.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "bellows.operatorName" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "bellows.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/* Whether to render an object of the Prometheus operator's API: .enabled is the
values flag (true, false or "auto"), .kind the object's kind, .root the chart's context.
"auto" renders it only when the cluster serves monitoring.coreos.com/v1 .kind. A live
cluster lists each kind it serves ("monitoring.coreos.com/v1/PrometheusRule"), so a
cluster with only the ServiceMonitor CRD gets no PrometheusRule; helm template's
--api-versions may name only the group version, which then stands for all its kinds. */}}
{{- define "bellows.monitoringEnabled" -}}
{{- $e := toString .enabled }}
{{- $caps := .root.Capabilities.APIVersions }}
{{- $gv := "monitoring.coreos.com/v1" }}
{{- $api := $caps.Has (printf "%s/%s" $gv .kind) }}
{{- if and (not $api) ($caps.Has $gv) }}
{{- $kinds := false }}
{{- range $caps }}{{ if hasPrefix (printf "%s/" $gv) . }}{{ $kinds = true }}{{ end }}{{ end }}
{{- $api = not $kinds }}
{{- end }}
{{- if or (eq $e "true") (and (eq $e "auto") $api) }}true{{ end }}
{{- end }}

{{/* Whether to render the operator's ServiceMonitor (serviceMonitor.enabled). */}}
{{- define "bellows.serviceMonitorEnabled" -}}
{{- include "bellows.monitoringEnabled" (dict "root" . "enabled" .Values.serviceMonitor.enabled "kind" "ServiceMonitor") }}
{{- end }}

{{/* Whether to render the alerting rules' PrometheusRule (prometheusRule.enabled). */}}
{{- define "bellows.prometheusRuleEnabled" -}}
{{- include "bellows.monitoringEnabled" (dict "root" . "enabled" .Values.prometheusRule.enabled "kind" "PrometheusRule") }}
{{- end }}
