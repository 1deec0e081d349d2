{{/*
Expand the name of the chart.
*/}}
{{- define "dtjob-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Default fully qualified app name, truncated at 63 characters (a DNS label). If the release
name contains the chart name it is used as is.
*/}}
{{- define "dtjob-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Chart name and version, for the chart label.
*/}}
{{- define "dtjob-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Common labels.
*/}}
{{- define "dtjob-operator.labels" -}}
helm.sh/chart: {{ include "dtjob-operator.chart" . }}
{{ include "dtjob-operator.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: dtjob
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Selector labels.
*/}}
{{- define "dtjob-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dtjob-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Name of the ServiceAccount to use.
*/}}
{{- define "dtjob-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "dtjob-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Operator and trainer images (tags default to the appVersion).
*/}}
{{- define "dtjob-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "dtjob-operator.trainerImage" -}}
{{- printf "%s:%s" .Values.trainer.image.repository (default .Chart.AppVersion .Values.trainer.image.tag) }}
{{- end }}

{{/*
Rules for the jobs and their children, in the watched namespaces (a ClusterRole when the
whole cluster is watched, a Role per namespace in namespaced mode). Exactly the
(group, resource, verb) rows of API_CALLS in operator/dtjob_operator/k8s.py and of
KOPF_CALLS in handlers.py, plus configmaps get/patch: a job's Role grants its pods those on
their progress ConfigMap, and RBAC lets the operator create that Role only if it holds them.
tests/unit/operator/test_chart.py fails on any difference.
*/}}
{{- define "dtjob-operator.jobRules" -}}
- apiGroups: [dtjob.io]
  resources: [distributedtrainingjobs]
  verbs: [get, list, watch, delete]
- apiGroups: [dtjob.io]
  resources: [distributedtrainingjobs/status]
  verbs: [patch]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, delete]
# A stalled gang's stacks, read from the tails of its pods' logs before the restart deletes
# them (docs/lifecycle.md, "Stalled gangs").
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [list, watch, create, get, patch]
- apiGroups: [""]
  resources: [services, serviceaccounts]
  verbs: [get, create]
# The claim spec.checkpoint.claimName names (CheckpointStorage condition): a get per
# reconcile of a job that names one; no watch (a job waiting for it looks again on a timer).
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [get]
# create: the job's events; list: the events of a pod that hangs in ContainerCreating, the
# only place a volume that cannot be mounted or attached is named (FailedMount).
- apiGroups: [""]
  resources: [events]
  verbs: [create, list]
- apiGroups: [""]
  resources: [resourcequotas]
  verbs: [list, watch]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, create]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, create]
# Jobs in a Kueue LocalQueue (docs/kueue.md): their Workloads (watched, so that Kueue's
# admission wakes the job), and the conditions applied to a Workload's status (PodsReady,
# Finished, an evicted gang's release), and the Workload of a job whose queue label was
# removed (deleted, so that its quota goes back). Unused where Kueue is not installed.
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads/status]
  verbs: [patch]
# Does a job's LocalQueue lead to MultiKueue (docs/multikueue.md)?
- apiGroups: [kueue.x-k8s.io]
  resources: [localqueues]
  verbs: [get]
{{- end }}
