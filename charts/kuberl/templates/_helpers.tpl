{{/* The chart name, overridable. */}}
{{- define "kuberl.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's object name: RELEASE-kuberl unless the release is already called kuberl. */}}
{{- define "kuberl.fullname" -}}
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

{{- define "kuberl.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kuberl.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "kuberl.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "kuberl.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "kuberl.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kuberl.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "kuberl.operatorImage" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* trainer.image is either a whole reference ("repo/name:tag") or {repository, tag}. */}}
{{- define "kuberl.trainerImage" -}}
{{- $image := .Values.trainer.image }}
{{- if kindIs "string" $image }}
{{- $image }}
{{- else }}
{{- printf "%s:%s" $image.repository (default .Chart.AppVersion $image.tag) }}
{{- end }}
{{- end }}

{{/* Namespaced RBAC needs somewhere to grant rights; the schema says so too, this names the fix. */}}
{{- define "kuberl.checkValues" -}}
{{- if and (eq .Values.rbac.scope "namespaced") (empty .Values.rbac.watchNamespaces) }}
{{- fail "rbac.watchNamespaces: list at least one namespace when rbac.scope is namespaced" }}
{{- end }}
{{- end }}

{{/*
The rules the operator uses, in a ClusterRole or in each namespaced Role: exactly the (resource, verb)
pairs a full lifecycle records (tests/integration/test_operator_rbac.py), nothing more. Children are
only created (names are deterministic; ownerReferences delete them), pods also listed and deleted.
*/}}
{{- define "kuberl.operatorRules" -}}
- apiGroups: [kuberl.io]
  resources: [rlexperiments]
  verbs: [get, list, watch, create, patch]
- apiGroups: [kuberl.io]
  resources: [rlexperiments/status]
  verbs: [patch]
{{- /* the children's ownerReferences block their experiment's foreground deletion (blockOwnerDeletion): the
OwnerReferencesPermissionEnforcement admission plugin (on in OpenShift) asks for this of whoever sets it */}}
- apiGroups: [kuberl.io]
  resources: [rlexperiments/finalizers]
  verbs: [update]
- apiGroups: [kuberl.io]
  resources: [rlsweeps]
  verbs: [get, list, watch]
- apiGroups: [kuberl.io]
  resources: [rlsweeps/status]
  verbs: [patch]
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch, create, delete]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, create, patch]
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, create]
- apiGroups: [""]
  resources: [services]
  verbs: [create]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [create]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- if has "volcano" .Values.rbac.gangSchedulers }}
- apiGroups: [scheduling.volcano.sh]
  resources: [podgroups]
  verbs: [get, create, patch]
{{- end }}
{{- if has "scheduler-plugins" .Values.rbac.gangSchedulers }}
- apiGroups: [scheduling.x-k8s.io]
  resources: [podgroups]
  verbs: [get, create, patch]
{{- end }}
{{- if and .Values.operator.peering .Values.rbac.watchNamespaces }}
- apiGroups: [kopf.dev]
  resources: [kopfpeerings]
  verbs: [list, watch, patch]
{{- end }}
{{- end }}
