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

{{/* Whether to render the operator's ServiceMonitor: enabled=true, or enabled=auto and
the cluster serves monitoring.coreos.com/v1 (helm template: --api-versions). */}}
{{- define "bellows.serviceMonitorEnabled" -}}
{{- $e := .Values.serviceMonitor.enabled }}
{{- $api := or (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1") (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1/ServiceMonitor") }}
{{- if or (eq (toString $e) "true") (and (eq (toString $e) "auto") $api) }}true{{ end }}
{{- end }}
