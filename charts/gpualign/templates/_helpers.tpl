{{- /* The controller's object names, and its Lease's: gpualign-controller unless overridden (a second release in
one namespace needs fullnameOverride). */ -}}
{{- define "gpualign.name" -}}
{{- default (printf "%s-controller" (default "gpualign" .Values.nameOverride)) .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- end }}

{{- define "gpualign.image" -}}
{{- $repo := required "image.repository is required: gpualign publishes no image; build it (`make image`, or `docker build` with the repository's Dockerfile), push it to your registry and set image.repository to it" .Values.image.repository -}}
{{ $repo }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

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

{{- /* The build Jobs' image: builds.image, else the controller's repository with -builder appended. */ -}}
{{- define "gpualign.builderImage" -}}
{{- $repo := .Values.builds.image.repository | default (printf "%s-builder" (required "image.repository is required" .Values.image.repository)) -}}
{{ $repo }}:{{ .Values.builds.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- define "gpualign.builderName" -}}
{{- printf "%s-builder" (include "gpualign.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end }}

{{- /* The namespace the build Jobs run in: one of their own, apart from the controller's (whose namespace can then
enforce Pod Security `restricted`). */ -}}
{{- define "gpualign.buildNamespace" -}}
{{- $ns := .Values.builds.namespace | default "gpualign-builds" -}}
{{- if and .Values.builds.enabled (eq $ns .Release.Namespace) -}}
{{- fail (printf "builds.namespace %s is the release namespace: the build pods are privileged, so they run in a namespace of their own (default gpualign-builds)" $ns) -}}
{{- end -}}
{{- $ns -}}
{{- end }}

{{/* Whether the controller reads Debian's archive (builds ahead of the kernel it installs next): "true" or "". */}}
{{- define "gpualign.readsArchive" -}}
{{- if and .Values.builds.enabled .Values.builds.archive.enabled -}}true{{- end -}}
{{- end -}}
