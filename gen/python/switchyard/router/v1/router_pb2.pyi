from google.protobuf import timestamp_pb2 as _timestamp_pb2
from switchyard.common.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Candidate(_message.Message):
    __slots__ = ["cost", "decode_blocks", "dp_rank", "instance_id", "lora_load_ms", "overlap_blocks", "prefill_blocks"]
    COST_FIELD_NUMBER: _ClassVar[int]
    DECODE_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    DP_RANK_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    LORA_LOAD_MS_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    PREFILL_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    cost: float
    decode_blocks: int
    dp_rank: int
    instance_id: int
    lora_load_ms: float
    overlap_blocks: int
    prefill_blocks: int
    def __init__(self, instance_id: _Optional[int] = ..., dp_rank: _Optional[int] = ..., overlap_blocks: _Optional[int] = ..., cost: _Optional[float] = ..., prefill_blocks: _Optional[int] = ..., decode_blocks: _Optional[int] = ..., lora_load_ms: _Optional[float] = ...) -> None: ...

class Endpoint(_message.Message):
    __slots__ = ["component", "endpoint", "namespace"]
    COMPONENT_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    component: str
    endpoint: str
    namespace: str
    def __init__(self, namespace: _Optional[str] = ..., component: _Optional[str] = ..., endpoint: _Optional[str] = ...) -> None: ...

class ExplainRouteRequest(_message.Message):
    __slots__ = ["block_hashes", "cache_salt", "exclude_instance_ids", "instance_id", "lora_name", "overlap_weight", "session_id", "target", "temperature", "token_ids"]
    BLOCK_HASHES_FIELD_NUMBER: _ClassVar[int]
    CACHE_SALT_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_INSTANCE_IDS_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    LORA_NAME_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    block_hashes: _containers.RepeatedScalarFieldContainer[int]
    cache_salt: str
    exclude_instance_ids: _containers.RepeatedScalarFieldContainer[int]
    instance_id: int
    lora_name: str
    overlap_weight: float
    session_id: str
    target: Target
    temperature: float
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, target: _Optional[_Union[Target, _Mapping]] = ..., token_ids: _Optional[_Iterable[int]] = ..., block_hashes: _Optional[_Iterable[int]] = ..., overlap_weight: _Optional[float] = ..., temperature: _Optional[float] = ..., exclude_instance_ids: _Optional[_Iterable[int]] = ..., instance_id: _Optional[int] = ..., session_id: _Optional[str] = ..., cache_salt: _Optional[str] = ..., lora_name: _Optional[str] = ...) -> None: ...

class ExplainRouteResponse(_message.Message):
    __slots__ = ["block_size", "candidates", "disaggregation", "dp_rank", "instance_id", "mode", "overlap_weight", "prefill_candidates", "prefill_dp_rank", "prefill_instance_id", "reason", "request_blocks", "session", "temperature"]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    DISAGGREGATION_FIELD_NUMBER: _ClassVar[int]
    DP_RANK_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    PREFILL_CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    PREFILL_DP_RANK_FIELD_NUMBER: _ClassVar[int]
    PREFILL_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REQUEST_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    block_size: int
    candidates: _containers.RepeatedCompositeFieldContainer[ExplainedCandidate]
    disaggregation: str
    dp_rank: int
    instance_id: int
    mode: str
    overlap_weight: float
    prefill_candidates: _containers.RepeatedCompositeFieldContainer[ExplainedCandidate]
    prefill_dp_rank: int
    prefill_instance_id: int
    reason: str
    request_blocks: int
    session: SessionBinding
    temperature: float
    def __init__(self, mode: _Optional[str] = ..., block_size: _Optional[int] = ..., request_blocks: _Optional[int] = ..., candidates: _Optional[_Iterable[_Union[ExplainedCandidate, _Mapping]]] = ..., instance_id: _Optional[int] = ..., reason: _Optional[str] = ..., overlap_weight: _Optional[float] = ..., temperature: _Optional[float] = ..., disaggregation: _Optional[str] = ..., prefill_instance_id: _Optional[int] = ..., prefill_candidates: _Optional[_Iterable[_Union[ExplainedCandidate, _Mapping]]] = ..., session: _Optional[_Union[SessionBinding, _Mapping]] = ..., dp_rank: _Optional[int] = ..., prefill_dp_rank: _Optional[int] = ...) -> None: ...

class ExplainedCandidate(_message.Message):
    __slots__ = ["candidate", "endpoint", "transport"]
    CANDIDATE_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    TRANSPORT_FIELD_NUMBER: _ClassVar[int]
    candidate: Candidate
    endpoint: Endpoint
    transport: _common_pb2.Transport
    def __init__(self, candidate: _Optional[_Union[Candidate, _Mapping]] = ..., transport: _Optional[_Union[_common_pb2.Transport, _Mapping]] = ..., endpoint: _Optional[_Union[Endpoint, _Mapping]] = ...) -> None: ...

class FreeRequest(_message.Message):
    __slots__ = ["request_id"]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class FreeResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class GetStatsRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class GetStatsResponse(_message.Message):
    __slots__ = ["events_applied", "events_duplicate", "events_gap", "indexed_blocks", "indexed_entries", "mode", "restored_snapshot_time", "session_bindings", "workers"]
    EVENTS_APPLIED_FIELD_NUMBER: _ClassVar[int]
    EVENTS_DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    EVENTS_GAP_FIELD_NUMBER: _ClassVar[int]
    INDEXED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    INDEXED_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    RESTORED_SNAPSHOT_TIME_FIELD_NUMBER: _ClassVar[int]
    SESSION_BINDINGS_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    events_applied: int
    events_duplicate: int
    events_gap: int
    indexed_blocks: int
    indexed_entries: int
    mode: str
    restored_snapshot_time: _timestamp_pb2.Timestamp
    session_bindings: int
    workers: _containers.RepeatedCompositeFieldContainer[WorkerStats]
    def __init__(self, mode: _Optional[str] = ..., indexed_blocks: _Optional[int] = ..., indexed_entries: _Optional[int] = ..., workers: _Optional[_Iterable[_Union[WorkerStats, _Mapping]]] = ..., events_applied: _Optional[int] = ..., events_duplicate: _Optional[int] = ..., events_gap: _Optional[int] = ..., restored_snapshot_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., session_bindings: _Optional[int] = ...) -> None: ...

class IndexSnapshot(_message.Message):
    __slots__ = ["stream_sequences", "taken_at", "workers"]
    class StreamSequencesEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    STREAM_SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    TAKEN_AT_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    stream_sequences: _containers.ScalarMap[str, int]
    taken_at: _timestamp_pb2.Timestamp
    workers: _containers.RepeatedCompositeFieldContainer[IndexSnapshotWorker]
    def __init__(self, stream_sequences: _Optional[_Mapping[str, int]] = ..., workers: _Optional[_Iterable[_Union[IndexSnapshotWorker, _Mapping]]] = ..., taken_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class IndexSnapshotWorker(_message.Message):
    __slots__ = ["block_hashes", "dp_rank", "instance_id", "last_event_id"]
    BLOCK_HASHES_FIELD_NUMBER: _ClassVar[int]
    DP_RANK_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    block_hashes: _containers.RepeatedScalarFieldContainer[int]
    dp_rank: int
    instance_id: int
    last_event_id: int
    def __init__(self, instance_id: _Optional[int] = ..., dp_rank: _Optional[int] = ..., last_event_id: _Optional[int] = ..., block_hashes: _Optional[_Iterable[int]] = ...) -> None: ...

class MarkPrefillCompleteRequest(_message.Message):
    __slots__ = ["request_id"]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class MarkPrefillCompleteResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ModelSaturation(_message.Message):
    __slots__ = ["capacity", "model", "room", "saturated"]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ROOM_FIELD_NUMBER: _ClassVar[int]
    SATURATED_FIELD_NUMBER: _ClassVar[int]
    capacity: int
    model: str
    room: int
    saturated: bool
    def __init__(self, model: _Optional[str] = ..., saturated: bool = ..., room: _Optional[int] = ..., capacity: _Optional[int] = ...) -> None: ...

class PrefillTarget(_message.Message):
    __slots__ = ["dp_rank", "endpoint", "instance_id", "overlap_blocks", "transport"]
    DP_RANK_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    TRANSPORT_FIELD_NUMBER: _ClassVar[int]
    dp_rank: int
    endpoint: Endpoint
    instance_id: int
    overlap_blocks: int
    transport: _common_pb2.Transport
    def __init__(self, instance_id: _Optional[int] = ..., dp_rank: _Optional[int] = ..., transport: _Optional[_Union[_common_pb2.Transport, _Mapping]] = ..., endpoint: _Optional[_Union[Endpoint, _Mapping]] = ..., overlap_blocks: _Optional[int] = ...) -> None: ...

class QueryOverlapsRequest(_message.Message):
    __slots__ = ["block_hashes", "cache_salt", "lora_name", "target", "token_ids"]
    BLOCK_HASHES_FIELD_NUMBER: _ClassVar[int]
    CACHE_SALT_FIELD_NUMBER: _ClassVar[int]
    LORA_NAME_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    block_hashes: _containers.RepeatedScalarFieldContainer[int]
    cache_salt: str
    lora_name: str
    target: Target
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, target: _Optional[_Union[Target, _Mapping]] = ..., token_ids: _Optional[_Iterable[int]] = ..., block_hashes: _Optional[_Iterable[int]] = ..., cache_salt: _Optional[str] = ..., lora_name: _Optional[str] = ...) -> None: ...

class QueryOverlapsResponse(_message.Message):
    __slots__ = ["candidates", "request_blocks"]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    REQUEST_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    candidates: _containers.RepeatedCompositeFieldContainer[Candidate]
    request_blocks: int
    def __init__(self, request_blocks: _Optional[int] = ..., candidates: _Optional[_Iterable[_Union[Candidate, _Mapping]]] = ...) -> None: ...

class ReplicaEvent(_message.Message):
    __slots__ = ["freed", "prefill_complete", "replica_id", "routed"]
    FREED_FIELD_NUMBER: _ClassVar[int]
    PREFILL_COMPLETE_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    ROUTED_FIELD_NUMBER: _ClassVar[int]
    freed: str
    prefill_complete: str
    replica_id: str
    routed: ReplicaRouted
    def __init__(self, replica_id: _Optional[str] = ..., routed: _Optional[_Union[ReplicaRouted, _Mapping]] = ..., prefill_complete: _Optional[str] = ..., freed: _Optional[str] = ...) -> None: ...

class ReplicaRouted(_message.Message):
    __slots__ = ["block_hashes", "dp_rank", "instance_id", "lora_name", "prefill_blocks", "prefill_dp_rank", "prefill_instance_id", "prefill_leg_blocks", "request_id", "session_id"]
    BLOCK_HASHES_FIELD_NUMBER: _ClassVar[int]
    DP_RANK_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    LORA_NAME_FIELD_NUMBER: _ClassVar[int]
    PREFILL_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    PREFILL_DP_RANK_FIELD_NUMBER: _ClassVar[int]
    PREFILL_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    PREFILL_LEG_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    block_hashes: _containers.RepeatedScalarFieldContainer[int]
    dp_rank: int
    instance_id: int
    lora_name: str
    prefill_blocks: int
    prefill_dp_rank: int
    prefill_instance_id: int
    prefill_leg_blocks: int
    request_id: str
    session_id: str
    def __init__(self, request_id: _Optional[str] = ..., instance_id: _Optional[int] = ..., dp_rank: _Optional[int] = ..., prefill_blocks: _Optional[int] = ..., block_hashes: _Optional[_Iterable[int]] = ..., prefill_instance_id: _Optional[int] = ..., prefill_dp_rank: _Optional[int] = ..., prefill_leg_blocks: _Optional[int] = ..., session_id: _Optional[str] = ..., lora_name: _Optional[str] = ...) -> None: ...

class ReportRequest(_message.Message):
    __slots__ = ["free", "prefill_complete"]
    FREE_FIELD_NUMBER: _ClassVar[int]
    PREFILL_COMPLETE_FIELD_NUMBER: _ClassVar[int]
    free: _containers.RepeatedScalarFieldContainer[str]
    prefill_complete: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, prefill_complete: _Optional[_Iterable[str]] = ..., free: _Optional[_Iterable[str]] = ...) -> None: ...

class ReportResponse(_message.Message):
    __slots__ = ["batches"]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    batches: int
    def __init__(self, batches: _Optional[int] = ...) -> None: ...

class RouteError(_message.Message):
    __slots__ = ["code", "message", "reason"]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    reason: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class RouteRequest(_message.Message):
    __slots__ = ["backlog", "block_hashes", "cache_salt", "exclude_instance_ids", "instance_id", "lora_name", "omit_candidates", "overlap_weight", "request_id", "session_id", "target", "temperature", "token_ids", "within_limit"]
    BACKLOG_FIELD_NUMBER: _ClassVar[int]
    BLOCK_HASHES_FIELD_NUMBER: _ClassVar[int]
    CACHE_SALT_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_INSTANCE_IDS_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    LORA_NAME_FIELD_NUMBER: _ClassVar[int]
    OMIT_CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    WITHIN_LIMIT_FIELD_NUMBER: _ClassVar[int]
    backlog: bool
    block_hashes: _containers.RepeatedScalarFieldContainer[int]
    cache_salt: str
    exclude_instance_ids: _containers.RepeatedScalarFieldContainer[int]
    instance_id: int
    lora_name: str
    omit_candidates: bool
    overlap_weight: float
    request_id: str
    session_id: str
    target: Target
    temperature: float
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    within_limit: bool
    def __init__(self, request_id: _Optional[str] = ..., target: _Optional[_Union[Target, _Mapping]] = ..., token_ids: _Optional[_Iterable[int]] = ..., block_hashes: _Optional[_Iterable[int]] = ..., overlap_weight: _Optional[float] = ..., temperature: _Optional[float] = ..., exclude_instance_ids: _Optional[_Iterable[int]] = ..., instance_id: _Optional[int] = ..., omit_candidates: bool = ..., session_id: _Optional[str] = ..., cache_salt: _Optional[str] = ..., lora_name: _Optional[str] = ..., backlog: bool = ..., within_limit: bool = ...) -> None: ...

class RouteResponse(_message.Message):
    __slots__ = ["candidates", "dp_rank", "endpoint", "instance_id", "overlap_blocks", "prefill", "request_blocks", "room", "saturated", "transport"]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    DP_RANK_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    PREFILL_FIELD_NUMBER: _ClassVar[int]
    REQUEST_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    ROOM_FIELD_NUMBER: _ClassVar[int]
    SATURATED_FIELD_NUMBER: _ClassVar[int]
    TRANSPORT_FIELD_NUMBER: _ClassVar[int]
    candidates: _containers.RepeatedCompositeFieldContainer[Candidate]
    dp_rank: int
    endpoint: Endpoint
    instance_id: int
    overlap_blocks: int
    prefill: PrefillTarget
    request_blocks: int
    room: int
    saturated: bool
    transport: _common_pb2.Transport
    def __init__(self, instance_id: _Optional[int] = ..., dp_rank: _Optional[int] = ..., transport: _Optional[_Union[_common_pb2.Transport, _Mapping]] = ..., overlap_blocks: _Optional[int] = ..., request_blocks: _Optional[int] = ..., candidates: _Optional[_Iterable[_Union[Candidate, _Mapping]]] = ..., endpoint: _Optional[_Union[Endpoint, _Mapping]] = ..., prefill: _Optional[_Union[PrefillTarget, _Mapping]] = ..., saturated: bool = ..., room: _Optional[int] = ...) -> None: ...

class RouteStreamRequest(_message.Message):
    __slots__ = ["route"]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    route: RouteRequest
    def __init__(self, route: _Optional[_Union[RouteRequest, _Mapping]] = ...) -> None: ...

class RouteStreamResponse(_message.Message):
    __slots__ = ["error", "route"]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    error: RouteError
    route: RouteResponse
    def __init__(self, route: _Optional[_Union[RouteResponse, _Mapping]] = ..., error: _Optional[_Union[RouteError, _Mapping]] = ...) -> None: ...

class SessionBinding(_message.Message):
    __slots__ = ["affinity", "dp_rank", "instance_id", "last_used", "outcome", "previous_instance_id", "session_id"]
    AFFINITY_FIELD_NUMBER: _ClassVar[int]
    DP_RANK_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_USED_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    affinity: str
    dp_rank: int
    instance_id: int
    last_used: _timestamp_pb2.Timestamp
    outcome: str
    previous_instance_id: int
    session_id: str
    def __init__(self, session_id: _Optional[str] = ..., instance_id: _Optional[int] = ..., dp_rank: _Optional[int] = ..., affinity: _Optional[str] = ..., outcome: _Optional[str] = ..., previous_instance_id: _Optional[int] = ..., last_used: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Target(_message.Message):
    __slots__ = ["endpoint", "model"]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    endpoint: Endpoint
    model: str
    def __init__(self, endpoint: _Optional[_Union[Endpoint, _Mapping]] = ..., model: _Optional[str] = ...) -> None: ...

class WatchSaturationRequest(_message.Message):
    __slots__ = ["models"]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, models: _Optional[_Iterable[str]] = ...) -> None: ...

class WatchSaturationResponse(_message.Message):
    __slots__ = ["models"]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelSaturation]
    def __init__(self, models: _Optional[_Iterable[_Union[ModelSaturation, _Mapping]]] = ...) -> None: ...

class WorkerStats(_message.Message):
    __slots__ = ["cached_blocks", "decode_blocks", "dp_rank", "instance_id", "last_event_time", "prefill_blocks", "requests"]
    CACHED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    DECODE_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    DP_RANK_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_EVENT_TIME_FIELD_NUMBER: _ClassVar[int]
    PREFILL_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    cached_blocks: int
    decode_blocks: int
    dp_rank: int
    instance_id: int
    last_event_time: _timestamp_pb2.Timestamp
    prefill_blocks: int
    requests: int
    def __init__(self, instance_id: _Optional[int] = ..., dp_rank: _Optional[int] = ..., cached_blocks: _Optional[int] = ..., requests: _Optional[int] = ..., prefill_blocks: _Optional[int] = ..., decode_blocks: _Optional[int] = ..., last_event_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
