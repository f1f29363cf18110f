{{- define "gpualign.name" -}}gpualign-controller{{- end }}

{{- define "gpualign.labels" -}}
app.kubernetes.io/name: gpualign
app.kubernetes.io/component: controller
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{- define "gpualign.selector" -}}
app: gpualign-controller
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
