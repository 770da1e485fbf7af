// Package wire holds Switchyard's wire conventions: the eventbus subjects that
// KV events, load reports and router replica sync travel on, the object store
// names of tokenizer files and router snapshots, the message id formats that
// make publishing idempotent, and the header that names an event's payload
// type. Workers, the router, the frontend and the CLI import these instead of
// each other's packages.
//
// The same conventions are written in the protos' comments (worker.proto,
// router.proto, eventbus.proto, registry.proto), which is what a worker in
// another language follows; the two must stay in step. The block hash is
// specified there too and implemented in pkg/kvhash.
package wire

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"
)

// Event names: the last element of an event subject. A subject is
// {namespace}.{component}.{event_name}; the namespace is also the eventbus
// stream.
const (
	// KVEventsName is where a worker publishes its switchyard.worker.v1.KvEventBatch
	// messages: {namespace}.{component}.kv_cache_update.
	KVEventsName = "kv_cache_update"
	// LoadName is where a worker publishes its switchyard.worker.v1.LoadMetrics:
	// {namespace}.{component}.load_metrics.
	LoadName = "load_metrics"
	// ReplicaSyncName is where router replicas share their decisions as
	// switchyard.router.v1.ReplicaEvent: {namespace}.router.replica_sync.
	ReplicaSyncName = "replica_sync"
	// RouterComponent is the component part of the replica sync subject.
	RouterComponent = "router"
	// AdmissionName is where frontend replicas share their admission
	// queues' tenants as switchyard.frontend.v1.AdmissionState, on NATS
	// Core: {namespace}.frontend.admission.
	AdmissionName = "admission"
	// FrontendComponent is the component part of the admission subject.
	FrontendComponent = "frontend"
	// DefaultAdmissionNamespace is the namespace of the admission subject
	// of frontends that serve every namespace (no --namespace).
	DefaultAdmissionNamespace = "switchyard"
)

// Object store names.
const (
	// TokenizerBucket is the object store bucket of tokenizer files. A file
	// is stored as TokenizerObject(model, file) and referenced from the model
	// card as TokenizerBucket + "/" + that name.
	TokenizerBucket = "tokenizers"
	// SnapshotBucket is the bucket of router KV index snapshots.
	SnapshotBucket = "router-snapshots"
	// SnapshotObject is the one object in SnapshotBucket: the latest
	// switchyard.router.v1.IndexSnapshot. Every router replica consumes the
	// same events, so any replica's snapshot serves them all.
	SnapshotObject = "kv-index"
)

// GenerateEndpoint is the endpoint name a worker serves generate on unless it
// registers another one.
const GenerateEndpoint = "generate"

// EmbedEndpoint is the endpoint name a worker serves embeddings on
// (EmbedRequest, answered by one EmbedResponse), beside its generate
// endpoint, when its model card lists the embed task.
const EmbedEndpoint = "embed"

// MetadataWorkerAPI is the instance metadata key of a worker's
// WorkerService address (host:port, gRPC): its KV events and state.
const MetadataWorkerAPI = "worker_api"

// CorePrefix is put before an event's subject on NATS when it travels on
// NATS Core instead of the stream (eventbus core = true, the core KV event
// plane): {namespace}.{component}.kv_cache_update goes out as
// _core.{namespace}.{component}.kv_cache_update, which no namespace's stream
// captures (names cannot start with "_").
const CorePrefix = "_core."

// CoreSubject is subject as it travels on NATS Core.
func CoreSubject(subject string) string { return CorePrefix + subject }

// HeaderType is the event header that names the payload's protobuf message
// type by its fully qualified name, such as "switchyard.worker.v1.KvEventBatch".
const HeaderType = "Switchyard-Type"

// HeaderEnvelopeRest is the header the eventbus sets on a delivered event
// that it stored together with the events after it, in one stream message
// (it coalesces a busy subject's events): how many events of the same
// stream sequence follow it. A consumer that remembers how far it has read
// counts a stream sequence as read once its last event is (see
// eventbusclient.Settled).
const HeaderEnvelopeRest = "Switchyard-Envelope-Rest"

// Subject is the event subject {namespace}.{component}.{name}.
func Subject(namespace, component, name string) string {
	return namespace + "." + component + "." + name
}

// KVEventsSubject is the subject a worker of component publishes KV events on.
func KVEventsSubject(namespace, component string) string {
	return Subject(namespace, component, KVEventsName)
}

// LoadSubject is the subject a worker of component publishes load on.
func LoadSubject(namespace, component string) string {
	return Subject(namespace, component, LoadName)
}

// ReplicaSyncSubject is the subject router replicas share decisions on.
func ReplicaSyncSubject(namespace string) string {
	return Subject(namespace, RouterComponent, ReplicaSyncName)
}

// AdmissionSubject is the subject frontend replicas share their admission
// state on; an empty namespace is DefaultAdmissionNamespace.
func AdmissionSubject(namespace string) string {
	if namespace == "" {
		namespace = DefaultAdmissionNamespace
	}
	return Subject(namespace, FrontendComponent, AdmissionName)
}

// KVEventsFilter matches the KV events of every component in namespace.
func KVEventsFilter(namespace string) string { return Subject(namespace, "*", KVEventsName) }

// LoadFilter matches the load reports of every component in namespace.
func LoadFilter(namespace string) string { return Subject(namespace, "*", LoadName) }

// EventName is the last element of subject (its event name).
func EventName(subject string) string {
	return subject[strings.LastIndexByte(subject, '.')+1:]
}

// Namespace is the first element of subject (its namespace and stream).
func Namespace(subject string) string {
	if i := strings.IndexByte(subject, '.'); i >= 0 {
		return subject[:i]
	}
	return subject
}

// KVEventsMsgID is the message id of a KV event batch:
// kv-{instance_id as lower-case hex}-{dp_rank}-{first_event_id}. A batch
// republished after a failover has the same id, so the eventbus stores it
// once.
func KVEventsMsgID(instanceID uint64, dpRank uint32, firstEventID uint64) string {
	return fmt.Sprintf("kv-%x-%d-%d", instanceID, dpRank, firstEventID)
}

// TokenizerObject is the object name of a tokenizer file of model: the model
// name with "/" written "--" and " " written "_", then "/" and the file's base
// name, such as "Qwen--Qwen3-0.6B/tokenizer.json".
func TokenizerObject(model, file string) string {
	return strings.NewReplacer("/", "--", " ", "_").Replace(model) + "/" + file
}

// TypeName is the HeaderType value for msg: its fully qualified name.
func TypeName(msg proto.Message) string {
	return string(msg.ProtoReflect().Descriptor().FullName())
}

// TypeHeaders is the header set naming msg's type.
func TypeHeaders(msg proto.Message) map[string]string {
	return map[string]string{HeaderType: TypeName(msg)}
}

// ErrWrongType is what CheckType returns for an event whose HeaderType
// names another message type than the one expected.
var ErrWrongType = errors.New("wire: event payload is not of the expected type")

// CheckType returns nil when headers name msg's type or name none (events
// from publishers that predate the header), and an error wrapping
// ErrWrongType when they name another: the payload is not what the subject
// promises, and decoding it would yield garbage rather than fail.
func CheckType(headers map[string]string, msg proto.Message) error {
	got, ok := headers[HeaderType]
	if !ok || got == TypeName(msg) {
		return nil
	}
	return fmt.Errorf("%w: it carries %q, want %q", ErrWrongType, got, TypeName(msg))
}
