{{/* Chart name (truncated to 63 characters). */}}
{{- define "popfleet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: release + chart unless the release name already contains it. */}}
{{- define "popfleet.fullname" -}}
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

{{/* Chart label value. */}}
{{- define "popfleet.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Selector labels: stable for the release's life (nothing version-ish). The brokers'
NetworkPolicy admits the admin port from pods labelled app.kubernetes.io/name=popfleet-operator.
*/}}
{{- define "popfleet.selectorLabels" -}}
app.kubernetes.io/name: popfleet-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Common labels. */}}
{{- define "popfleet.labels" -}}
helm.sh/chart: {{ include "popfleet.chart" . }}
{{ include "popfleet.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: popfleet
app.kubernetes.io/component: operator
{{- end }}

{{/* The operator's ServiceAccount name. */}}
{{- define "popfleet.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "popfleet.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Peering object name. */}}
{{- define "popfleet.peeringName" -}}
{{- default (include "popfleet.fullname" .) .Values.peering.name }}
{{- end }}

{{/* Image reference. */}}
{{- define "popfleet.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
Labels of the uninstall clean-up hook's objects: their own name, so that neither the
operator's Deployment selector nor the brokers' NetworkPolicy ever matches the hook's pod.
*/}}
{{- define "popfleet.cleanupLabels" -}}
helm.sh/chart: {{ include "popfleet.chart" . }}
app.kubernetes.io/name: popfleet-cleanup
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: popfleet
app.kubernetes.io/component: cleanup
{{- end }}

{{/*
Annotations of a pre-delete hook object; the argument is its weight (RBAC before the Job).
Kept when the hook fails, for its log; replaced by the next attempt.
*/}}
{{- define "popfleet.cleanupHook" -}}
helm.sh/hook: pre-delete
helm.sh/hook-weight: {{ . | quote }}
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end }}
