package registry

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
)

// The DynamoWorkerMetadata custom resource (deploy/kubernetes/crd.yaml): one
// per worker pod, named after the pod, owned by it.
const (
	kubeGroup    = "switchyard.dev"
	kubeVersion  = "v1alpha1"
	kubeKind     = "DynamoWorkerMetadata"
	kubeResource = "dynamoworkermetadatas"

	// kubeFieldManager owns a resource's base fields; each endpoint and model
	// entry has a field manager of its own (entryManager), so that concurrent
	// registrations of one worker merge instead of overwriting each other.
	kubeFieldManager = "switchyard-registry"

	// labelManagedBy marks the resources the registry writes and watches.
	labelManagedBy = "app.kubernetes.io/managed-by"
	// labelInstanceID holds the instance id in hex, to find a lease's resource.
	labelInstanceID = "switchyard.dev/instance-id"
	// LabelRole is the worker pod label that sets the role of every
	// instance the pod registers: agg, prefill or decode (pkg/wire
	// RoleName). The registry reads it when the pod claims its resource
	// (GrantLease, or Register without a lease) and keeps it in the
	// resource's spec.role; an instance that registers another role is
	// refused. Without the label, each instance has the role it registered.
	LabelRole = "switchyard.dev/role"
)

// WorkerMetadataGVR is the DynamoWorkerMetadata resource.
var WorkerMetadataGVR = schema.GroupVersionResource{Group: kubeGroup, Version: kubeVersion, Resource: kubeResource}

// workerSpec is a DynamoWorkerMetadata's spec.
type workerSpec struct {
	PodName    string `json:"podName,omitempty"`
	PodUID     string `json:"podUID,omitempty"`
	InstanceID string `json:"instanceID,omitempty"` // hex, as in etcd keys
	TTLSeconds int64  `json:"ttlSeconds,omitempty"`
	// Role is the pod's LabelRole when the pod had one at its claim.
	Role      string          `json:"role,omitempty"`
	Endpoints []endpointEntry `json:"endpoints,omitempty"`
	Models    []modelEntry    `json:"models,omitempty"`
}

// endpointEntry is one registered endpoint; namespace, component and
// endpoint are its list-map keys.
type endpointEntry struct {
	Namespace string            `json:"namespace"`
	Component string            `json:"component"`
	Endpoint  string            `json:"endpoint"`
	Transport transportEntry    `json:"transport"`
	Metadata  map[string]string `json:"metadata,omitempty"`
	// Role is the role the worker registered ("" for none).
	Role       string           `json:"role,omitempty"`
	KvTransfer *kvTransferEntry `json:"kvTransfer,omitempty"`
}

// kvTransferEntry is a KvTransfer in the resource's camelCase.
type kvTransferEntry struct {
	Kind             string `json:"kind,omitempty"`
	EngineID         string `json:"engineID,omitempty"`
	Address          string `json:"address,omitempty"`
	DataParallelSize uint32 `json:"dataParallelSize,omitempty"`
}

// transportEntry is a transport in the JSON shape of the etcd records: a
// request plane's name (see transport.Planes) to its address, for each
// plane the instance serves.
type transportEntry map[string]string

// transportEntryOf is t's entry ({} for none).
func transportEntryOf(t *commonv1.Transport) transportEntry {
	e := transportEntry{}
	for _, a := range transport.AddressesOf(t) {
		e[string(a.Kind)] = a.Addr
	}
	return e
}

// proto is the entry's transport: nil when it names no address of a known
// plane.
func (e transportEntry) proto() *commonv1.Transport {
	addrs := make([]transport.Address, 0, len(e))
	for kind, addr := range e {
		addrs = append(addrs, transport.Address{Kind: transport.Plane(kind), Addr: addr})
	}
	t := transport.TransportOf(addrs...)
	if len(transport.AddressesOf(t)) == 0 {
		return nil
	}
	return t
}

// modelEntry is one model card; namespace, component and endpoint are its
// list-map keys, as the etcd key of a card holds them. It carries every
// field of registryv1.ModelCard but the instance id (the resource's):
// TestModelEntryCarriesEveryCardField fails when the card gains a field this
// does not, and the CRD's schema must list each (the API server drops
// fields its schema does not name).
type modelEntry struct {
	Namespace        string              `json:"namespace"`
	Component        string              `json:"component"`
	Endpoint         string              `json:"endpoint"`
	ModelName        string              `json:"modelName"`
	BlockSize        uint32              `json:"blockSize,omitempty"`
	ContextLength    uint32              `json:"contextLength,omitempty"`
	Tokenizer        []tokenizerArtifact `json:"tokenizer,omitempty"`
	Metadata         map[string]string   `json:"metadata,omitempty"`
	ToolCallParser   string              `json:"toolCallParser,omitempty"`
	ReasoningParser  string              `json:"reasoningParser,omitempty"`
	Tasks            []string            `json:"tasks,omitempty"`
	LoraAdapters     []loraEntry         `json:"loraAdapters,omitempty"`
	MaxLoras         uint32              `json:"maxLoras,omitempty"`
	DataParallelSize uint32              `json:"dataParallelSize,omitempty"`
}

// loraEntry is one LoRA adapter of a card.
type loraEntry struct {
	Name string `json:"name"`
	Path string `json:"path,omitempty"`
}

// taskName is a task as the resource spells it: its enum name in lower
// case without the MODEL_TASK_ prefix ("generate", "embed"), or the number
// of a value this build has no name for (a newer worker's).
func taskName(t registryv1.ModelTask) string {
	if n, ok := registryv1.ModelTask_name[int32(t)]; ok {
		return strings.ToLower(strings.TrimPrefix(n, "MODEL_TASK_"))
	}
	return strconv.FormatInt(int64(t), 10)
}

// parseTask is taskName's inverse; ok is false for a string that is
// neither.
func parseTask(s string) (registryv1.ModelTask, bool) {
	if v, ok := registryv1.ModelTask_value["MODEL_TASK_"+strings.ToUpper(s)]; ok && s == strings.ToLower(s) {
		return registryv1.ModelTask(v), true
	}
	if n, err := strconv.ParseInt(s, 10, 32); err == nil && strconv.FormatInt(n, 10) == s {
		if _, named := registryv1.ModelTask_name[int32(n)]; !named {
			return registryv1.ModelTask(n), true
		}
	}
	return 0, false
}

type tokenizerArtifact struct {
	Name      string `json:"name"`
	SHA256    string `json:"sha256"`
	Size      int64  `json:"size"`
	ObjectKey string `json:"objectKey,omitempty"`
}

// kubeInstanceID derives a pod's instance id from its UID: stable for the
// pod's life, new for a new pod, 63 bits (a valid lease id) and never 0.
func kubeInstanceID(podUID string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(podUID))
	id := h.Sum64() & (1<<63 - 1)
	if id == 0 {
		id = 1
	}
	return id
}

func idLabel(id uint64) string { return strconv.FormatUint(id, 16) }

func toEndpointEntry(in *registryv1.Instance) endpointEntry {
	e := endpointEntry{Namespace: in.Namespace, Component: in.Component, Endpoint: in.Endpoint, Metadata: in.Metadata, Role: roleValue(in.Role)}
	e.Transport = transportEntryOf(in.GetTransport())
	if v := toKvTransferValue(in.KvTransfer); v != nil {
		e.KvTransfer = &kvTransferEntry{Kind: v.Kind, EngineID: v.EngineID, Address: v.Address, DataParallelSize: v.DataParallelSize}
	}
	return e
}

// instance is the entry as the registry serves it; an entry whose role or
// transfer kind does not parse (written by hand, or by another version) is
// an error.
func (e endpointEntry) instance(id uint64) (*registryv1.Instance, error) {
	in := &registryv1.Instance{Namespace: e.Namespace, Component: e.Component, Endpoint: e.Endpoint, InstanceId: id, Metadata: e.Metadata}
	in.Transport = e.Transport.proto()
	role, err := parseRoleValue(e.Role)
	if err != nil {
		return nil, err
	}
	in.Role = role
	if t := e.KvTransfer; t != nil {
		v := &kvTransferValue{Kind: t.Kind, EngineID: t.EngineID, Address: t.Address, DataParallelSize: t.DataParallelSize}
		if in.KvTransfer, err = v.proto(); err != nil {
			return nil, err
		}
	}
	return in, nil
}

// podRole reads a pod's LabelRole: ROLE_UNSPECIFIED without the label, an
// error naming the valid values for a value that is not one.
func podRole(labels map[string]string) (commonv1.Role, error) {
	v, ok := labels[LabelRole]
	if !ok {
		return commonv1.Role_ROLE_UNSPECIFIED, nil
	}
	r, err := parseRoleValue(v)
	if err != nil || r == commonv1.Role_ROLE_UNSPECIFIED {
		return 0, fmt.Errorf("%w: pod label %s=%q: valid values are %s", ErrInvalid, LabelRole, v, strings.Join(wire.RoleNames, ", "))
	}
	return r, nil
}

func toModelEntry(c *registryv1.ModelCard) modelEntry {
	m := modelEntry{Namespace: c.Namespace, Component: c.Component, Endpoint: c.Endpoint, ModelName: c.ModelName,
		BlockSize: c.BlockSize, ContextLength: c.ContextLength, Metadata: c.Metadata, ToolCallParser: c.ToolCallParser,
		ReasoningParser: c.ReasoningParser, MaxLoras: c.MaxLoras, DataParallelSize: c.DataParallelSize}
	for _, t := range c.Tokenizer {
		m.Tokenizer = append(m.Tokenizer, tokenizerArtifact{Name: t.Name, SHA256: t.Sha256, Size: t.Size, ObjectKey: t.ObjectKey})
	}
	for _, t := range c.Tasks {
		m.Tasks = append(m.Tasks, taskName(t))
	}
	for _, l := range c.LoraAdapters {
		m.LoraAdapters = append(m.LoraAdapters, loraEntry{Name: l.Name, Path: l.Path})
	}
	return m
}

func (m modelEntry) card(id uint64) *registryv1.ModelCard {
	c := &registryv1.ModelCard{Namespace: m.Namespace, Component: m.Component, Endpoint: m.Endpoint, InstanceId: id,
		ModelName: m.ModelName, BlockSize: m.BlockSize, ContextLength: m.ContextLength, Metadata: m.Metadata,
		ToolCallParser: m.ToolCallParser, ReasoningParser: m.ReasoningParser, MaxLoras: m.MaxLoras, DataParallelSize: m.DataParallelSize}
	for _, t := range m.Tokenizer {
		c.Tokenizer = append(c.Tokenizer, &registryv1.TokenizerArtifact{Name: t.Name, Sha256: t.SHA256, Size: t.Size, ObjectKey: t.ObjectKey})
	}
	for _, s := range m.Tasks {
		// A task spelt neither way is one this build cannot serve: left
		// out, as an unknown field would be.
		if t, ok := parseTask(s); ok {
			c.Tasks = append(c.Tasks, t)
		}
	}
	for _, l := range m.LoraAdapters {
		c.LoraAdapters = append(c.LoraAdapters, &registryv1.LoraAdapter{Name: l.Name, Path: l.Path})
	}
	return c
}

// specOf decodes a DynamoWorkerMetadata's spec.
func specOf(u *unstructured.Unstructured) (workerSpec, error) {
	var spec workerSpec
	raw, ok := u.Object["spec"]
	if !ok {
		return spec, fmt.Errorf("%s/%s has no spec", u.GetNamespace(), u.GetName())
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return spec, err
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		return spec, fmt.Errorf("%s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return spec, nil
}

// readyPods collects the pods that some EndpointSlice lists as ready: by UID
// when the slice names it, else by namespace/name. An endpoint whose ready
// condition is unset counts as ready, as the EndpointSlice API says.
type readyPods struct {
	uids  map[string]bool
	names map[string]bool
}

func readyPodsOf(slices []*discoveryv1.EndpointSlice) readyPods {
	r := readyPods{uids: map[string]bool{}, names: map[string]bool{}}
	for _, s := range slices {
		for _, ep := range s.Endpoints {
			if ep.TargetRef == nil || ep.TargetRef.Kind != "Pod" {
				continue
			}
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			if ep.TargetRef.UID != "" {
				r.uids[string(ep.TargetRef.UID)] = true
				continue
			}
			ns := ep.TargetRef.Namespace
			if ns == "" {
				ns = s.Namespace
			}
			r.names[ns+"/"+ep.TargetRef.Name] = true
		}
	}
	return r
}

func (r readyPods) has(namespace, name, uid string) bool {
	return r.uids[uid] || r.names[namespace+"/"+name]
}

// joinState is the registry's view on Kubernetes: the instances and model
// cards of ready pods, by their etcd-layout keys.
type joinState struct {
	instances map[string]*registryv1.Instance
	models    map[string]*registryv1.ModelCard
}

// join computes the view from the worker resources and the ready pods. A
// resource being deleted, or whose entries break the registry's rules
// (written by hand, or by another version), contributes nothing invalid.
func join(crs []*unstructured.Unstructured, ready readyPods) joinState {
	st := joinState{instances: map[string]*registryv1.Instance{}, models: map[string]*registryv1.ModelCard{}}
	for _, u := range crs {
		if u.GetDeletionTimestamp() != nil {
			continue
		}
		spec, err := specOf(u)
		if err != nil || spec.PodUID == "" || !ready.has(u.GetNamespace(), spec.PodName, spec.PodUID) {
			continue
		}
		id := kubeInstanceID(spec.PodUID)
		podRole, err := parseRoleValue(spec.Role)
		if err != nil {
			continue
		}
		for _, e := range spec.Endpoints {
			in, err := e.instance(id)
			if err != nil {
				continue
			}
			// The pod's label, when it had one, is the role of all its
			// instances.
			if podRole != commonv1.Role_ROLE_UNSPECIFIED {
				in.Role = podRole
			}
			if validateInstance(in) != nil {
				continue
			}
			st.instances[instanceKey(in.Namespace, in.Component, in.Endpoint, id)] = in
		}
		for _, m := range spec.Models {
			c := m.card(id)
			if validateCard(c) != nil {
				continue
			}
			st.models[modelKey(c.Namespace, c.Component, c.Endpoint, id)] = c
		}
	}
	return st
}

// diffInstances lists the events that turn old into cur, in key order. An
// instance whose transport changed is a DELETE then a PUT, so that clients
// drop what they held for the old address (Dynamo's issue #12566: clients
// kept a restarted worker's old port).
func diffInstances(old, cur map[string]*registryv1.Instance, rev int64) []*registryv1.InstanceEvent {
	var out []*registryv1.InstanceEvent
	del := func(in *registryv1.Instance) {
		out = append(out, &registryv1.InstanceEvent{Type: registryv1.EventType_EVENT_TYPE_DELETE, Revision: rev,
			Instance: &registryv1.Instance{Namespace: in.Namespace, Component: in.Component, Endpoint: in.Endpoint, InstanceId: in.InstanceId}})
	}
	for _, k := range unionKeys(old, cur) {
		o, n := old[k], cur[k]
		switch {
		case n == nil:
			del(o)
		case o == nil:
			out = append(out, &registryv1.InstanceEvent{Type: registryv1.EventType_EVENT_TYPE_PUT, Revision: rev, Instance: n})
		case proto.Equal(o, n):
		default:
			if !proto.Equal(o.Transport, n.Transport) {
				del(o)
			}
			out = append(out, &registryv1.InstanceEvent{Type: registryv1.EventType_EVENT_TYPE_PUT, Revision: rev, Instance: n})
		}
	}
	return out
}

// diffModels lists the events that turn old into cur, in key order. A
// DELETE carries the whole card, as the etcd backend's does.
func diffModels(old, cur map[string]*registryv1.ModelCard, rev int64) []*registryv1.ModelEvent {
	var out []*registryv1.ModelEvent
	for _, k := range unionKeys(old, cur) {
		o, n := old[k], cur[k]
		switch {
		case n == nil:
			out = append(out, &registryv1.ModelEvent{Type: registryv1.EventType_EVENT_TYPE_DELETE, Revision: rev, Card: o})
		case o == nil || !proto.Equal(o, n):
			out = append(out, &registryv1.ModelEvent{Type: registryv1.EventType_EVENT_TYPE_PUT, Revision: rev, Card: n})
		}
	}
	return out
}

func unionKeys[V any](a, b map[string]V) []string {
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

func sortedValues[V any](m map[string]V, keep func(V) bool) []V {
	keys := make([]string, 0, len(m))
	for k, v := range m {
		if keep(v) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	out := make([]V, len(keys))
	for i, k := range keys {
		out[i] = m[k]
	}
	return out
}

// matchInstance reports whether in passes f (validated: set fields are a
// prefix of namespace, component, endpoint).
func matchInstance(f *registryv1.InstanceFilter, in *registryv1.Instance) bool {
	return (f.GetNamespace() == "" || f.GetNamespace() == in.Namespace) &&
		(f.GetComponent() == "" || f.GetComponent() == in.Component) &&
		(f.GetEndpoint() == "" || f.GetEndpoint() == in.Endpoint)
}

func matchModel(f *registryv1.ModelFilter, c *registryv1.ModelCard) bool {
	return (f.GetNamespace() == "" || f.GetNamespace() == c.Namespace) &&
		(f.GetModelName() == "" || f.GetModelName() == c.ModelName)
}
