{{- define "allot.name" -}}{{ .Release.Name }}{{- end -}}

{{- define "allot.labels" -}}
app.kubernetes.io/name: allot
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- define "allot.selector" -}}
app.kubernetes.io/name: allot
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "allot.webhookService" -}}{{ .Release.Name }}-webhook{{- end -}}

{{- define "allot.dashboardSelector" -}}
app.kubernetes.io/name: allot-dashboard
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
