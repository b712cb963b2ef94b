{{- define "probe.fullname" -}}
{{- printf "%s-probe" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "probe.selectorLabels" -}}
app.kubernetes.io/name: probe
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "probe.labels" -}}
{{ include "probe.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}
