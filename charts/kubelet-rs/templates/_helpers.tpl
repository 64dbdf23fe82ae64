{{/* The release's base name, also the name of most objects. */}}
{{- define "kubelet-rs.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kubelet-rs.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kubelet-rs.labels" -}}
{{ include "kubelet-rs.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | replace "+" "_" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kubelet-rs.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.Version .Values.image.tag) -}}
{{- end -}}

{{/* The extra flags as one blank-separated string; a flag holding a blank is an error. */}}
{{- define "kubelet-rs.extraFlags" -}}
{{- range .Values.extraFlags -}}
{{- if regexMatch "[[:space:]\"'\\\\%$]" . -}}
{{- fail (printf "extraFlags: %q may not hold blanks, quotes, backslashes, %% or $" .) -}}
{{- end -}}
{{- end -}}
{{- join " " .Values.extraFlags -}}
{{- end -}}

{{/* The installer's settings, shared by the DaemonSet and the pre-delete Job. */}}
{{- define "kubelet-rs.env" -}}
- name: NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: LEASE_NAME
  value: {{ printf "%s-lock" (include "kubelet-rs.fullname" .) }}
- name: CONFIGMAP_NAME
  value: {{ printf "%s-control" (include "kubelet-rs.fullname" .) }}
- name: POLL_S
  value: {{ .Values.pollSeconds | int | quote }}
{{- end -}}
