{{- define "railyard.name" -}}{{ .Values.nameOverride | default "railyard" | trunc 63 | trimSuffix "-" }}{{- end -}}

{{- define "railyard.fullname" -}}
{{- $name := include "railyard.name" . -}}
{{- if .Values.fullnameOverride -}}{{ .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if eq .Release.Name $name -}}{{ $name }}
{{- else -}}{{ printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end -}}
{{- end -}}

{{- define "railyard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}{{ .Values.serviceAccount.name | default (include "railyard.fullname" .) }}
{{- else -}}{{ required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end -}}
{{- end -}}

{{- define "railyard.image" -}}
{{- $repository := required "image.repository is required: the registry path you pushed the operator image to (built by hack/images.py build, or docker build .), e.g. --set image.repository=registry.example/railyard" .Values.image.repository -}}
{{ $repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "railyard.labels" -}}
app.kubernetes.io/name: {{ include "railyard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "railyard.selector" -}}
app.kubernetes.io/name: {{ include "railyard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
