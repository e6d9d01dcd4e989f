{{- define "solomon-train.fullname" -}}
{{- printf "%s" .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}

{{/* The image reference: repository:tag, or repository[:tag]@digest when image.digest pins it. */}}
{{- define "solomon-train.image" -}}
{{- if not (or .Values.image.tag .Values.image.digest) -}}
{{- fail "image.digest (or at least image.tag) is required: pin the image built from this repository's Dockerfile" -}}
{{- end -}}
{{- with .Values.image.digest -}}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" .) -}}
{{- fail "image.digest must be sha256: followed by 64 hex digits" -}}
{{- end -}}
{{- end -}}
{{- $ref := .Values.image.repository -}}
{{- with .Values.image.tag }}{{ $ref = printf "%s:%s" $ref . }}{{ end -}}
{{- with .Values.image.digest }}{{ $ref = printf "%s@%s" $ref . }}{{ end -}}
{{- $ref -}}
{{- end -}}

{{- define "solomon-train.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}
