{{/* Names. */}}
{{- define "memplane.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "memplane.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "memplane.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "memplane.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "memplane.operator.fullname" -}}
{{- printf "%s-operator" (include "memplane.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The standard labels (app.kubernetes.io/*). */}}
{{- define "memplane.selectorLabels" -}}
app.kubernetes.io/name: {{ include "memplane.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "memplane.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "memplane.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: memplane
{{- end }}

{{/* Labels of one component (retrieval, writeback, compaction, admin, operator, postgresql, migrate). */}}
{{- define "memplane.componentSelectorLabels" -}}
{{ include "memplane.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "memplane.componentLabels" -}}
{{ include "memplane.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "memplane.operator.labels" -}}
{{ include "memplane.componentLabels" (dict "root" . "component" "operator") }}
{{- end }}

{{- define "memplane.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}{{ default (include "memplane.fullname" .) .Values.serviceAccount.name }}{{ else }}{{ default "default" .Values.serviceAccount.name }}{{ end }}
{{- end }}

{{- define "memplane.operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}{{ default (include "memplane.operator.fullname" .) .Values.serviceAccount.operatorName }}{{ else }}{{ default "default" .Values.serviceAccount.operatorName }}{{ end }}
{{- end }}

{{- define "memplane.image" -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end }}

{{/* The full gRPC name of a component's service (its health-check name). */}}
{{- define "memplane.grpcService" -}}
{{- get (dict "retrieval" "memplane.v1.RetrievalService" "writeback" "memplane.v1.WriteBackService" "compaction" "memplane.v1.CompactionService" "admin" "memplane.v1.AdminService") . }}
{{- end }}

{{/* host:port of a component's Service inside the cluster. */}}
{{- define "memplane.target" -}}
{{ include "memplane.fullname" .root }}-{{ .component }}.{{ .root.Release.Namespace }}.svc:{{ .root.Values.services.port }}
{{- end }}

{{/* Secret and key of the DSN (the bundled PostgreSQL's, or the one given). */}}
{{- define "memplane.dsnSecretName" -}}
{{- if .Values.postgresql.enabled }}{{ include "memplane.fullname" . }}-postgresql{{ else }}{{ required "database.dsnSecret.name is required (a Secret with the DSN of a PostgreSQL with pgvector), or set postgresql.enabled=true for a trial database" .Values.database.dsnSecret.name }}{{ end }}
{{- end }}

{{- define "memplane.dsnSecretKey" -}}
{{- if .Values.postgresql.enabled }}dsn{{ else }}{{ .Values.database.dsnSecret.key }}{{ end }}
{{- end }}

{{- define "memplane.adminKeySecretName" -}}
{{- default (printf "%s-admin-key" (include "memplane.fullname" .)) .Values.auth.adminKeySecret.name }}
{{- end }}

{{/* The DSN from its Secret; with database.clusters, each cluster's DSNs from their Secrets
     (MEMPLANE_CLUSTER_<i>_DSN, _READ_DSN) and MEMPLANE_DATABASE__CLUSTERS naming them as
     $(VAR) references, which Kubernetes expands from the variables defined before it. */}}
{{- define "memplane.databaseEnv" -}}
{{ include "memplane.databaseEnvLines" . | trim }}
{{- end }}

{{- define "memplane.databaseEnvLines" -}}
{{- if .Values.database.clusters }}
{{- if .Values.postgresql.enabled }}{{ fail "database.clusters needs postgresql.enabled=false: the bundled PostgreSQL is one database" }}{{ end }}
{{- $listed := list }}
{{- range $i, $c := .Values.database.clusters }}
- name: MEMPLANE_CLUSTER_{{ $i }}_DSN
  valueFrom:
    secretKeyRef: {name: {{ $c.dsnSecret.name }}, key: {{ $c.dsnSecret.key }}}
{{- $cluster := dict "name" $c.name "dsn" (printf "$(MEMPLANE_CLUSTER_%d_DSN)" $i) }}
{{- with $c.readDsnSecret }}
- name: MEMPLANE_CLUSTER_{{ $i }}_READ_DSN
  valueFrom:
    secretKeyRef: {name: {{ .name }}, key: {{ .key }}}
{{- $_ := set $cluster "read_dsn" (printf "$(MEMPLANE_CLUSTER_%d_READ_DSN)" $i) }}
{{- end }}
{{- $listed = append $listed $cluster }}
{{- end }}
- name: MEMPLANE_DATABASE__CLUSTERS
  value: {{ toJson $listed | quote }}
{{- else }}
- name: MEMPLANE_DATABASE__DSN
  valueFrom:
    secretKeyRef:
      name: {{ include "memplane.dsnSecretName" . }}
      key: {{ include "memplane.dsnSecretKey" . }}
{{- end }}
{{- end }}

{{/* Environment every services container gets (the DSN and admin key from Secrets, the cluster settings). */}}
{{- define "memplane.serviceEnv" -}}
{{ include "memplane.databaseEnv" . }}
{{- with .Values.database.readDsnSecret }}{{ if and .name (not $.Values.database.clusters) }}
- name: MEMPLANE_DATABASE__READ_DSN
  valueFrom:
    secretKeyRef: {name: {{ .name }}, key: {{ .key }}}
{{- end }}{{ end }}
- name: MEMPLANE_AUTH__ADMIN_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "memplane.adminKeySecretName" . }}
      key: {{ .Values.auth.adminKeySecret.key }}
- name: MEMPLANE_AUTH__BOOTSTRAP_DEFAULT_WORKSPACE
  value: "false"
- name: MEMPLANE_DATABASE__MIGRATE_ON_START
  value: "false"
{{- with .Values.secrets.embeddingApiKey }}{{ if .name }}
- name: MEMPLANE_EMBEDDING__API_KEY
  valueFrom:
    secretKeyRef: {name: {{ .name }}, key: {{ .key }}}
{{- end }}{{ end }}
{{- with .Values.secrets.llmApiKey }}{{ if .name }}
- name: MEMPLANE_LLM__API_KEY
  valueFrom:
    secretKeyRef: {name: {{ .name }}, key: {{ .key }}}
{{- end }}{{ end }}
{{- with .Values.secrets.rerankApiKey }}{{ if .name }}
- name: MEMPLANE_RERANK__API_KEY
  valueFrom:
    secretKeyRef: {name: {{ .name }}, key: {{ .key }}}
{{- end }}{{ end }}
{{- if .Values.metrics.enabled }}
- name: OTEL_METRICS_EXPORTER
  value: prometheus
- name: OTEL_EXPORTER_PROMETHEUS_HOST
  value: 0.0.0.0
- name: OTEL_EXPORTER_PROMETHEUS_PORT
  value: {{ .Values.metrics.port | quote }}
{{- end }}
{{- end }}

{{/* Pod-level scheduling pass-through. */}}
{{- define "memplane.scheduling" -}}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- end }}

{{/* A settings value as an environment string (integers stay integers, not 1e+06). */}}
{{- define "memplane.envValue" -}}
{{- if kindIs "string" . }}{{ . }}
{{- else if kindIs "bool" . }}{{ . }}
{{- else if kindIs "float64" . }}{{ if eq . (float64 (int64 .)) }}{{ int64 . }}{{ else }}{{ . }}{{ end }}
{{- else if or (kindIs "int64" .) (kindIs "int" .) }}{{ . }}
{{- else }}{{ toJson . }}{{ end }}
{{- end }}

{{/* NetworkPolicy egress rules: DNS, and the database (bundled or given). */}}
{{- define "memplane.np.dns" -}}
- to:
    - namespaceSelector: {}
      podSelector:
        matchLabels:
          k8s-app: kube-dns
  ports:
    - {protocol: UDP, port: 53}
    - {protocol: TCP, port: 53}
{{- end }}
{{- define "memplane.np.database" -}}
{{- if .Values.postgresql.enabled }}
- to:
    - podSelector:
        matchLabels:
          {{- include "memplane.componentSelectorLabels" (dict "root" . "component" "postgresql") | nindent 10 }}
  ports:
    - {protocol: TCP, port: 5432}
{{- else }}
- ports:
    - {protocol: TCP, port: {{ .Values.database.port }}}
  {{- with .Values.networkPolicy.databasePeers }}
  to:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
{{- end }}
