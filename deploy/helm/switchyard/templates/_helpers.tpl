{{/* Names, labels and the pieces every Switchyard pod shares. */}}

{{- define "switchyard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's base name; each component appends -<component>. */}}
{{- define "switchyard.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Name of a component's objects: (dict "root" $ "component" "registry").
A component whose settings are another's (a worker pool's are the worker's)
names it as "values": (dict "root" $ "component" "worker-prefill" "values" "worker").
*/}}
{{- define "switchyard.componentName" -}}
{{- printf "%s-%s" (include "switchyard.fullname" .root) .component -}}
{{- end -}}

{{- define "switchyard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "switchyard.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "switchyard.labels" -}}
{{ include "switchyard.selectorLabels" . }}
app.kubernetes.io/part-of: switchyard
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Image of a service: (dict "root" $ "service" "registry"). */}}
{{- define "switchyard.image" -}}
{{- $img := .root.Values.image -}}
{{- $repo := printf "%s%s" $img.repositoryPrefix .service -}}
{{- if $img.registry -}}{{- $repo = printf "%s/%s" (trimSuffix "/" $img.registry) $repo -}}{{- end -}}
{{- printf "%s:%s" $repo (default .root.Chart.AppVersion $img.tag) -}}
{{- end -}}

{{/* Address of a component's gRPC Service. */}}
{{- define "switchyard.addr" -}}
{{- $port := index .root.Values .component "service" "grpcPort" -}}
{{- printf "%s:%v" (include "switchyard.componentName" .) $port -}}
{{- end -}}

{{/* Secret of a component's TLS identity. */}}
{{- define "switchyard.tlsSecret" -}}
{{- default (printf "%s-tls" (include "switchyard.componentName" .)) (index .root.Values.tls.secrets .component) -}}
{{- end -}}

{{/* Pod spec fields every component shares. */}}
{{- define "switchyard.podCommon" -}}
{{- $v := index .root.Values (default .component .values) -}}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .root.Values.podSecurityContext | nindent 2 }}
{{- with $v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Pod metadata every component shares, with .labels added to the pod's. */}}
{{- define "switchyard.podMeta" -}}
labels:
  {{- include "switchyard.labels" . | nindent 2 }}
  {{- with .labels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
  {{- with .root.Values.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with .root.Values.podAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Container fields every component shares: image, security, resources. */}}
{{- define "switchyard.containerCommon" -}}
image: {{ include "switchyard.image" (dict "root" .root "service" (default .component .service)) | quote }}
imagePullPolicy: {{ .root.Values.image.pullPolicy }}
securityContext:
  {{- toYaml .root.Values.securityContext | nindent 2 }}
resources:
  {{- toYaml (index .root.Values (default .component .values) "resources") | nindent 2 }}
{{- end -}}

{{/*
Environment of a service's TLS identity, by its generic variables (so that
`service healthcheck` in an exec probe reads the same settings).
(dict "root" $ "prefix" "SWITCHYARD_ROUTER_" "server" true "client" true)
*/}}
{{- define "switchyard.tlsEnv" -}}
{{- if .root.Values.tls.enabled }}
{{- if .server }}
- name: {{ .prefix }}TLS_CERT
  value: /etc/switchyard/tls/tls.crt
- name: {{ .prefix }}TLS_KEY
  value: /etc/switchyard/tls/tls.key
- name: {{ .prefix }}TLS_CA
  value: /etc/switchyard/tls/ca.crt
{{- end }}
{{- if .client }}
- name: {{ .prefix }}CLIENT_TLS_CERT
  value: /etc/switchyard/tls/tls.crt
- name: {{ .prefix }}CLIENT_TLS_KEY
  value: /etc/switchyard/tls/tls.key
- name: {{ .prefix }}CLIENT_TLS_CA
  value: /etc/switchyard/tls/ca.crt
{{- end }}
{{- end }}
{{- end -}}

{{- define "switchyard.tlsMount" -}}
{{- if .root.Values.tls.enabled }}
- name: tls
  mountPath: /etc/switchyard/tls
  readOnly: true
{{- end }}
{{- end -}}

{{- define "switchyard.tlsVolume" -}}
{{- if .root.Values.tls.enabled }}
- name: tls
  secret:
    secretName: {{ include "switchyard.tlsSecret" . }}
{{- end }}
{{- end -}}

{{/*
Readiness and liveness of a gRPC service: the kubelet's native gRPC probe on
plaintext; with TLS (which the kubelet's probe cannot speak) the binary's own
`healthcheck`, which reads the service's flags from the same environment.
*/}}
{{- define "switchyard.grpcProbes" -}}
{{- $port := index .root.Values .component "service" "grpcPort" -}}
{{- $probe := dict "grpc" (dict "port" $port) -}}
{{- if .root.Values.tls.enabled -}}
{{- $probe = dict "exec" (dict "command" (list "/usr/local/bin/service" "healthcheck")) -}}
{{- end -}}
startupProbe:
  {{- toYaml $probe | nindent 2 }}
  periodSeconds: 2
  failureThreshold: 60
readinessProbe:
  {{- toYaml $probe | nindent 2 }}
  periodSeconds: 5
  timeoutSeconds: 3
livenessProbe:
  {{- toYaml $probe | nindent 2 }}
  periodSeconds: 10
  timeoutSeconds: 3
  failureThreshold: 6
{{- end -}}

{{/* The Service of a gRPC component, with its metrics port. */}}
{{- define "switchyard.grpcService" -}}
{{- $svc := index .root.Values .component "service" -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "switchyard.componentName" . }}
  labels:
    {{- include "switchyard.labels" . | nindent 4 }}
spec:
  type: {{ $svc.type }}
  selector:
    {{- include "switchyard.selectorLabels" . | nindent 4 }}
  ports:
    - name: grpc
      port: {{ $svc.grpcPort }}
      targetPort: grpc
      appProtocol: grpc
    - name: metrics
      port: {{ $svc.metricsPort }}
      targetPort: metrics
{{- end -}}

{{/* A component's PodDisruptionBudget, when enabled. */}}
{{- define "switchyard.pdb" -}}
{{- $v := index .root.Values (default .component .values) -}}
{{- if $v.pdb.enabled }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "switchyard.componentName" . }}
  labels:
    {{- include "switchyard.labels" . | nindent 4 }}
spec:
  maxUnavailable: {{ $v.pdb.maxUnavailable }}
  selector:
    matchLabels:
      {{- include "switchyard.selectorLabels" . | nindent 6 }}
{{- end }}
{{- end -}}

{{/* Checks that stop a release that cannot work. */}}
{{- define "switchyard.validate" -}}
{{- $v := .Values -}}
{{- if not (has $v.discovery.backend (list "kv_store" "kubernetes")) -}}
{{- fail (printf "discovery.backend %q: valid values are kv_store and kubernetes" $v.discovery.backend) -}}
{{- end -}}
{{- if not (has (lower $v.requestPlane) (list "tcp" "http" "nats")) -}}
{{- fail (printf "requestPlane %q: valid values are tcp, http and nats" $v.requestPlane) -}}
{{- end -}}
{{- if and (eq $v.discovery.backend "kv_store") (not $v.discovery.etcd.endpoints) (gt (int $v.registry.replicas) 1) -}}
{{- fail "registry.replicas > 1 needs discovery.etcd.endpoints (an embedded etcd is one node) or discovery.backend: kubernetes" -}}
{{- end -}}
{{- if and (not $v.nats.url) (gt (int $v.eventbus.replicas) 1) -}}
{{- fail "eventbus.replicas > 1 needs nats.url (an embedded nats-server is per pod)" -}}
{{- end -}}
{{- if and (eq (lower $v.requestPlane) "nats") (not $v.nats.url) -}}
{{- fail "requestPlane nats needs nats.url: the frontend and the workers share that NATS" -}}
{{- end -}}
{{- if and (gt (int $v.router.replicas) 1) (not $v.router.replicaSync) -}}
{{- fail "router.replicas > 1 needs router.replicaSync: replicas share active-request state over the eventbus" -}}
{{- end -}}
{{- end -}}

{{/* The EndpointSlice label selector of the registry, from the labels. */}}
{{- define "switchyard.endpointSliceSelector" -}}
{{- $sel := list -}}
{{- range $k, $v := .Values.discovery.kubernetes.endpointSliceLabels -}}
{{- $sel = append $sel (printf "%s=%s" $k $v) -}}
{{- end -}}
{{- join "," $sel -}}
{{- end -}}
