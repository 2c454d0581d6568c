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

{{/* The namespaces webhook.foreignGPUPods leaves alone, as a match condition (admission.Peers.exemptCEL). */}}
{{- define "allot.tenantNamespaceCEL" -}}
!(request.namespace in ['kube-system', 'kube-public', 'kube-node-lease', '{{ .Release.Namespace }}'{{ range .Values.webhook.foreignGPUPodsExempt }}, '{{ . }}'{{ end }}])
{{- end -}}

{{/* Another scheduler's pod asking for NVIDIA GPUs or MIG instances, or with ResourceClaims (admission.ForeignCondition). */}}
{{- define "allot.foreignGPUPodCEL" -}}
object.spec.schedulerName != 'allot' && (object.spec.containers.exists(c, has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(k, k == 'nvidia.com/gpu' || k.startsWith('nvidia.com/mig-'))) || (has(c.resources.requests) && c.resources.requests.exists(k, k == 'nvidia.com/gpu' || k.startsWith('nvidia.com/mig-'))))) || (has(object.spec.initContainers) && object.spec.initContainers.exists(c, has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(k, k == 'nvidia.com/gpu' || k.startsWith('nvidia.com/mig-'))) || (has(c.resources.requests) && c.resources.requests.exists(k, k == 'nvidia.com/gpu' || k.startsWith('nvidia.com/mig-')))))) || (has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0))
{{- end -}}
