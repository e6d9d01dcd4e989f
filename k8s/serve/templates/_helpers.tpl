{{- define "solomon-serve.fullname" -}}
{{- printf "%s-serve" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The image reference, pinned: repository[:tag]@digest. A digest is required. */}}
{{- define "solomon-serve.image" -}}
{{- if not .Values.image.digest -}}
{{- fail "image.digest is required: pin the serving image by the sha256 digest you pushed" -}}
{{- end -}}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" .Values.image.digest) -}}
{{- fail "image.digest must be sha256: followed by 64 hex digits" -}}
{{- end -}}
{{- $ref := .Values.image.repository -}}
{{- with .Values.image.tag }}{{ $ref = printf "%s:%s" $ref . }}{{ end -}}
{{- printf "%s@%s" $ref .Values.image.digest -}}
{{- end -}}

{{- define "solomon-serve.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "solomon-serve.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
