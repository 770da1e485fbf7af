from switchyard.common.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
EVENT_TYPE_DELETE: EventType
EVENT_TYPE_PUT: EventType
EVENT_TYPE_UNSPECIFIED: EventType
MODEL_TASK_EMBED: ModelTask
MODEL_TASK_GENERATE: ModelTask
MODEL_TASK_UNSPECIFIED: ModelTask
SNAPSHOT_REASON_COMPACTED: SnapshotReason
SNAPSHOT_REASON_INITIAL: SnapshotReason
SNAPSHOT_REASON_UNSPECIFIED: SnapshotReason
WATCH_RESPONSE_KIND_EVENTS: WatchResponseKind
WATCH_RESPONSE_KIND_PROGRESS: WatchResponseKind
WATCH_RESPONSE_KIND_SNAPSHOT: WatchResponseKind
WATCH_RESPONSE_KIND_UNSPECIFIED: WatchResponseKind

class AcquireReadLockRequest(_message.Message):
    __slots__ = ["lease_id", "name", "timeout_ms"]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    lease_id: int
    name: str
    timeout_ms: int
    def __init__(self, name: _Optional[str] = ..., lease_id: _Optional[int] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class AcquireReadLockResponse(_message.Message):
    __slots__ = ["token"]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    token: str
    def __init__(self, token: _Optional[str] = ...) -> None: ...

class AcquireWriteLockRequest(_message.Message):
    __slots__ = ["lease_id", "name"]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    lease_id: int
    name: str
    def __init__(self, name: _Optional[str] = ..., lease_id: _Optional[int] = ...) -> None: ...

class AcquireWriteLockResponse(_message.Message):
    __slots__ = ["acquired", "token"]
    ACQUIRED_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    acquired: bool
    token: str
    def __init__(self, acquired: bool = ..., token: _Optional[str] = ...) -> None: ...

class CreateBucketRequest(_message.Message):
    __slots__ = ["bucket"]
    BUCKET_FIELD_NUMBER: _ClassVar[int]
    bucket: str
    def __init__(self, bucket: _Optional[str] = ...) -> None: ...

class CreateBucketResponse(_message.Message):
    __slots__ = ["created"]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    created: bool
    def __init__(self, created: bool = ...) -> None: ...

class CreateKeyRequest(_message.Message):
    __slots__ = ["bucket", "key", "lease_id", "value"]
    BUCKET_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    bucket: str
    key: str
    lease_id: int
    value: bytes
    def __init__(self, bucket: _Optional[str] = ..., key: _Optional[str] = ..., value: _Optional[bytes] = ..., lease_id: _Optional[int] = ...) -> None: ...

class CreateKeyResponse(_message.Message):
    __slots__ = ["revision"]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    revision: int
    def __init__(self, revision: _Optional[int] = ...) -> None: ...

class DeleteKeyRequest(_message.Message):
    __slots__ = ["bucket", "key"]
    BUCKET_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    bucket: str
    key: str
    def __init__(self, bucket: _Optional[str] = ..., key: _Optional[str] = ...) -> None: ...

class DeleteKeyResponse(_message.Message):
    __slots__ = ["deleted", "revision"]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    revision: int
    def __init__(self, deleted: bool = ..., revision: _Optional[int] = ...) -> None: ...

class DeregisterRequest(_message.Message):
    __slots__ = ["lease_id"]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    lease_id: int
    def __init__(self, lease_id: _Optional[int] = ...) -> None: ...

class DeregisterResponse(_message.Message):
    __slots__ = ["revision"]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    revision: int
    def __init__(self, revision: _Optional[int] = ...) -> None: ...

class GetKeyRequest(_message.Message):
    __slots__ = ["bucket", "key"]
    BUCKET_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    bucket: str
    key: str
    def __init__(self, bucket: _Optional[str] = ..., key: _Optional[str] = ...) -> None: ...

class GetKeyResponse(_message.Message):
    __slots__ = ["kv"]
    KV_FIELD_NUMBER: _ClassVar[int]
    kv: KeyValue
    def __init__(self, kv: _Optional[_Union[KeyValue, _Mapping]] = ...) -> None: ...

class GrantLeaseRequest(_message.Message):
    __slots__ = ["pod", "ttl_seconds"]
    POD_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    pod: KubernetesPod
    ttl_seconds: int
    def __init__(self, ttl_seconds: _Optional[int] = ..., pod: _Optional[_Union[KubernetesPod, _Mapping]] = ...) -> None: ...

class GrantLeaseResponse(_message.Message):
    __slots__ = ["lease_id", "lease_token", "ttl_seconds"]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    lease_id: int
    lease_token: str
    ttl_seconds: int
    def __init__(self, lease_id: _Optional[int] = ..., ttl_seconds: _Optional[int] = ..., lease_token: _Optional[str] = ...) -> None: ...

class Instance(_message.Message):
    __slots__ = ["component", "endpoint", "instance_id", "kv_transfer", "metadata", "namespace", "role", "transport"]
    class MetadataEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    COMPONENT_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    KV_TRANSFER_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TRANSPORT_FIELD_NUMBER: _ClassVar[int]
    component: str
    endpoint: str
    instance_id: int
    kv_transfer: _common_pb2.KvTransfer
    metadata: _containers.ScalarMap[str, str]
    namespace: str
    role: _common_pb2.Role
    transport: _common_pb2.Transport
    def __init__(self, namespace: _Optional[str] = ..., component: _Optional[str] = ..., endpoint: _Optional[str] = ..., instance_id: _Optional[int] = ..., transport: _Optional[_Union[_common_pb2.Transport, _Mapping]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., role: _Optional[_Union[_common_pb2.Role, str]] = ..., kv_transfer: _Optional[_Union[_common_pb2.KvTransfer, _Mapping]] = ...) -> None: ...

class InstanceEvent(_message.Message):
    __slots__ = ["instance", "revision", "type"]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    instance: Instance
    revision: int
    type: EventType
    def __init__(self, type: _Optional[_Union[EventType, str]] = ..., instance: _Optional[_Union[Instance, _Mapping]] = ..., revision: _Optional[int] = ...) -> None: ...

class InstanceFilter(_message.Message):
    __slots__ = ["component", "endpoint", "namespace"]
    COMPONENT_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    component: str
    endpoint: str
    namespace: str
    def __init__(self, namespace: _Optional[str] = ..., component: _Optional[str] = ..., endpoint: _Optional[str] = ...) -> None: ...

class KeepAliveRequest(_message.Message):
    __slots__ = ["lease_id"]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    lease_id: int
    def __init__(self, lease_id: _Optional[int] = ...) -> None: ...

class KeepAliveResponse(_message.Message):
    __slots__ = ["found", "lease_id", "ttl_seconds"]
    FOUND_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    found: bool
    lease_id: int
    ttl_seconds: int
    def __init__(self, lease_id: _Optional[int] = ..., found: bool = ..., ttl_seconds: _Optional[int] = ...) -> None: ...

class KeyEvent(_message.Message):
    __slots__ = ["kv", "revision", "type"]
    KV_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    kv: KeyValue
    revision: int
    type: EventType
    def __init__(self, type: _Optional[_Union[EventType, str]] = ..., kv: _Optional[_Union[KeyValue, _Mapping]] = ..., revision: _Optional[int] = ...) -> None: ...

class KeyValue(_message.Message):
    __slots__ = ["create_revision", "key", "lease_id", "mod_revision", "value"]
    CREATE_REVISION_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    MOD_REVISION_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    create_revision: int
    key: str
    lease_id: int
    mod_revision: int
    value: bytes
    def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ..., create_revision: _Optional[int] = ..., mod_revision: _Optional[int] = ..., lease_id: _Optional[int] = ...) -> None: ...

class KubernetesPod(_message.Message):
    __slots__ = ["name", "namespace", "uid"]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    name: str
    namespace: str
    uid: str
    def __init__(self, name: _Optional[str] = ..., namespace: _Optional[str] = ..., uid: _Optional[str] = ...) -> None: ...

class ListInstancesRequest(_message.Message):
    __slots__ = ["filter"]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    filter: InstanceFilter
    def __init__(self, filter: _Optional[_Union[InstanceFilter, _Mapping]] = ...) -> None: ...

class ListInstancesResponse(_message.Message):
    __slots__ = ["instances", "revision"]
    INSTANCES_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    instances: _containers.RepeatedCompositeFieldContainer[Instance]
    revision: int
    def __init__(self, instances: _Optional[_Iterable[_Union[Instance, _Mapping]]] = ..., revision: _Optional[int] = ...) -> None: ...

class ListKeysRequest(_message.Message):
    __slots__ = ["bucket", "prefix"]
    BUCKET_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    bucket: str
    prefix: str
    def __init__(self, bucket: _Optional[str] = ..., prefix: _Optional[str] = ...) -> None: ...

class ListKeysResponse(_message.Message):
    __slots__ = ["kvs", "revision"]
    KVS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    kvs: _containers.RepeatedCompositeFieldContainer[KeyValue]
    revision: int
    def __init__(self, kvs: _Optional[_Iterable[_Union[KeyValue, _Mapping]]] = ..., revision: _Optional[int] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ["filter"]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    filter: ModelFilter
    def __init__(self, filter: _Optional[_Union[ModelFilter, _Mapping]] = ...) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ["cards", "revision"]
    CARDS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    cards: _containers.RepeatedCompositeFieldContainer[ModelCard]
    revision: int
    def __init__(self, cards: _Optional[_Iterable[_Union[ModelCard, _Mapping]]] = ..., revision: _Optional[int] = ...) -> None: ...

class LoraAdapter(_message.Message):
    __slots__ = ["name", "path"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    name: str
    path: str
    def __init__(self, name: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class ModelCard(_message.Message):
    __slots__ = ["block_size", "component", "context_length", "data_parallel_size", "endpoint", "instance_id", "lora_adapters", "max_loras", "metadata", "model_name", "namespace", "reasoning_parser", "tasks", "tokenizer", "tool_call_parser"]
    class MetadataEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    COMPONENT_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_LENGTH_FIELD_NUMBER: _ClassVar[int]
    DATA_PARALLEL_SIZE_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    LORA_ADAPTERS_FIELD_NUMBER: _ClassVar[int]
    MAX_LORAS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    REASONING_PARSER_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_PARSER_FIELD_NUMBER: _ClassVar[int]
    block_size: int
    component: str
    context_length: int
    data_parallel_size: int
    endpoint: str
    instance_id: int
    lora_adapters: _containers.RepeatedCompositeFieldContainer[LoraAdapter]
    max_loras: int
    metadata: _containers.ScalarMap[str, str]
    model_name: str
    namespace: str
    reasoning_parser: str
    tasks: _containers.RepeatedScalarFieldContainer[ModelTask]
    tokenizer: _containers.RepeatedCompositeFieldContainer[TokenizerArtifact]
    tool_call_parser: str
    def __init__(self, namespace: _Optional[str] = ..., component: _Optional[str] = ..., endpoint: _Optional[str] = ..., instance_id: _Optional[int] = ..., model_name: _Optional[str] = ..., block_size: _Optional[int] = ..., context_length: _Optional[int] = ..., tokenizer: _Optional[_Iterable[_Union[TokenizerArtifact, _Mapping]]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., tool_call_parser: _Optional[str] = ..., reasoning_parser: _Optional[str] = ..., tasks: _Optional[_Iterable[_Union[ModelTask, str]]] = ..., lora_adapters: _Optional[_Iterable[_Union[LoraAdapter, _Mapping]]] = ..., max_loras: _Optional[int] = ..., data_parallel_size: _Optional[int] = ...) -> None: ...

class ModelEvent(_message.Message):
    __slots__ = ["card", "revision", "type"]
    CARD_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    card: ModelCard
    revision: int
    type: EventType
    def __init__(self, type: _Optional[_Union[EventType, str]] = ..., card: _Optional[_Union[ModelCard, _Mapping]] = ..., revision: _Optional[int] = ...) -> None: ...

class ModelFilter(_message.Message):
    __slots__ = ["model_name", "namespace"]
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    model_name: str
    namespace: str
    def __init__(self, namespace: _Optional[str] = ..., model_name: _Optional[str] = ...) -> None: ...

class PutKeyRequest(_message.Message):
    __slots__ = ["bucket", "expected_revision", "key", "lease_id", "value"]
    BUCKET_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_REVISION_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    bucket: str
    expected_revision: int
    key: str
    lease_id: int
    value: bytes
    def __init__(self, bucket: _Optional[str] = ..., key: _Optional[str] = ..., value: _Optional[bytes] = ..., lease_id: _Optional[int] = ..., expected_revision: _Optional[int] = ...) -> None: ...

class PutKeyResponse(_message.Message):
    __slots__ = ["revision"]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    revision: int
    def __init__(self, revision: _Optional[int] = ...) -> None: ...

class RegisterModelRequest(_message.Message):
    __slots__ = ["card", "lease_id"]
    CARD_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    card: ModelCard
    lease_id: int
    def __init__(self, card: _Optional[_Union[ModelCard, _Mapping]] = ..., lease_id: _Optional[int] = ...) -> None: ...

class RegisterModelResponse(_message.Message):
    __slots__ = ["revision"]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    revision: int
    def __init__(self, revision: _Optional[int] = ...) -> None: ...

class RegisterRequest(_message.Message):
    __slots__ = ["instance", "lease_id", "pod", "ttl_seconds"]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    POD_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    instance: Instance
    lease_id: int
    pod: KubernetesPod
    ttl_seconds: int
    def __init__(self, instance: _Optional[_Union[Instance, _Mapping]] = ..., ttl_seconds: _Optional[int] = ..., lease_id: _Optional[int] = ..., pod: _Optional[_Union[KubernetesPod, _Mapping]] = ...) -> None: ...

class RegisterResponse(_message.Message):
    __slots__ = ["instance_id", "lease_token", "revision", "ttl_seconds"]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    instance_id: int
    lease_token: str
    revision: int
    ttl_seconds: int
    def __init__(self, instance_id: _Optional[int] = ..., ttl_seconds: _Optional[int] = ..., revision: _Optional[int] = ..., lease_token: _Optional[str] = ...) -> None: ...

class ReleaseLockRequest(_message.Message):
    __slots__ = ["token"]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    token: str
    def __init__(self, token: _Optional[str] = ...) -> None: ...

class ReleaseLockResponse(_message.Message):
    __slots__ = ["released"]
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    released: bool
    def __init__(self, released: bool = ...) -> None: ...

class TokenizerArtifact(_message.Message):
    __slots__ = ["name", "object_key", "sha256", "size"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OBJECT_KEY_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    name: str
    object_key: str
    sha256: str
    size: int
    def __init__(self, name: _Optional[str] = ..., sha256: _Optional[str] = ..., size: _Optional[int] = ..., object_key: _Optional[str] = ...) -> None: ...

class WatchInstancesRequest(_message.Message):
    __slots__ = ["filter", "resume_revision"]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    RESUME_REVISION_FIELD_NUMBER: _ClassVar[int]
    filter: InstanceFilter
    resume_revision: int
    def __init__(self, filter: _Optional[_Union[InstanceFilter, _Mapping]] = ..., resume_revision: _Optional[int] = ...) -> None: ...

class WatchInstancesResponse(_message.Message):
    __slots__ = ["events", "instances", "kind", "revision", "snapshot_reason"]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    INSTANCES_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_REASON_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[InstanceEvent]
    instances: _containers.RepeatedCompositeFieldContainer[Instance]
    kind: WatchResponseKind
    revision: int
    snapshot_reason: SnapshotReason
    def __init__(self, kind: _Optional[_Union[WatchResponseKind, str]] = ..., snapshot_reason: _Optional[_Union[SnapshotReason, str]] = ..., instances: _Optional[_Iterable[_Union[Instance, _Mapping]]] = ..., events: _Optional[_Iterable[_Union[InstanceEvent, _Mapping]]] = ..., revision: _Optional[int] = ...) -> None: ...

class WatchKeysRequest(_message.Message):
    __slots__ = ["bucket", "prefix", "resume_revision"]
    BUCKET_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    RESUME_REVISION_FIELD_NUMBER: _ClassVar[int]
    bucket: str
    prefix: str
    resume_revision: int
    def __init__(self, bucket: _Optional[str] = ..., prefix: _Optional[str] = ..., resume_revision: _Optional[int] = ...) -> None: ...

class WatchKeysResponse(_message.Message):
    __slots__ = ["events", "kind", "kvs", "revision", "snapshot_reason"]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    KVS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_REASON_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[KeyEvent]
    kind: WatchResponseKind
    kvs: _containers.RepeatedCompositeFieldContainer[KeyValue]
    revision: int
    snapshot_reason: SnapshotReason
    def __init__(self, kind: _Optional[_Union[WatchResponseKind, str]] = ..., snapshot_reason: _Optional[_Union[SnapshotReason, str]] = ..., kvs: _Optional[_Iterable[_Union[KeyValue, _Mapping]]] = ..., events: _Optional[_Iterable[_Union[KeyEvent, _Mapping]]] = ..., revision: _Optional[int] = ...) -> None: ...

class WatchModelsRequest(_message.Message):
    __slots__ = ["filter", "resume_revision"]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    RESUME_REVISION_FIELD_NUMBER: _ClassVar[int]
    filter: ModelFilter
    resume_revision: int
    def __init__(self, filter: _Optional[_Union[ModelFilter, _Mapping]] = ..., resume_revision: _Optional[int] = ...) -> None: ...

class WatchModelsResponse(_message.Message):
    __slots__ = ["cards", "events", "kind", "revision", "snapshot_reason"]
    CARDS_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_REASON_FIELD_NUMBER: _ClassVar[int]
    cards: _containers.RepeatedCompositeFieldContainer[ModelCard]
    events: _containers.RepeatedCompositeFieldContainer[ModelEvent]
    kind: WatchResponseKind
    revision: int
    snapshot_reason: SnapshotReason
    def __init__(self, kind: _Optional[_Union[WatchResponseKind, str]] = ..., snapshot_reason: _Optional[_Union[SnapshotReason, str]] = ..., cards: _Optional[_Iterable[_Union[ModelCard, _Mapping]]] = ..., events: _Optional[_Iterable[_Union[ModelEvent, _Mapping]]] = ..., revision: _Optional[int] = ...) -> None: ...

class WatchResponseKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class SnapshotReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class EventType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ModelTask(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
