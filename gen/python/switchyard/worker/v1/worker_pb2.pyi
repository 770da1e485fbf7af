from google.protobuf import timestamp_pb2 as _timestamp_pb2
from switchyard.common.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
DISAGGREGATION_LEG_DECODE: DisaggregationLeg
DISAGGREGATION_LEG_PREFILL: DisaggregationLeg
DISAGGREGATION_LEG_UNSPECIFIED: DisaggregationLeg
FINISH_REASON_CANCELLED: FinishReason
FINISH_REASON_ERROR: FinishReason
FINISH_REASON_LENGTH: FinishReason
FINISH_REASON_STOP: FinishReason
FINISH_REASON_UNSPECIFIED: FinishReason
KV_MEDIUM_CPU: KvMedium
KV_MEDIUM_DISK: KvMedium
KV_MEDIUM_GPU: KvMedium
KV_MEDIUM_UNKNOWN: KvMedium
KV_MEDIUM_UNSPECIFIED: KvMedium

class EmbedInput(_message.Message):
    __slots__ = ["token_ids"]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, token_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class EmbedRequest(_message.Message):
    __slots__ = ["dimensions", "inputs", "model", "request_id"]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    dimensions: int
    inputs: _containers.RepeatedCompositeFieldContainer[EmbedInput]
    model: str
    request_id: str
    def __init__(self, request_id: _Optional[str] = ..., model: _Optional[str] = ..., inputs: _Optional[_Iterable[_Union[EmbedInput, _Mapping]]] = ..., dimensions: _Optional[int] = ...) -> None: ...

class EmbedResponse(_message.Message):
    __slots__ = ["embeddings", "prompt_tokens"]
    EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    embeddings: _containers.RepeatedCompositeFieldContainer[Embedding]
    prompt_tokens: int
    def __init__(self, embeddings: _Optional[_Iterable[_Union[Embedding, _Mapping]]] = ..., prompt_tokens: _Optional[int] = ...) -> None: ...

class Embedding(_message.Message):
    __slots__ = ["values"]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, values: _Optional[_Iterable[float]] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ["cache_salt", "dp_rank", "guided_decoding", "handoff", "leg", "logprobs", "lora_name", "max_tokens", "model", "prompt_logprobs", "request_id", "sampling", "stop", "token_ids"]
    CACHE_SALT_FIELD_NUMBER: _ClassVar[int]
    DP_RANK_FIELD_NUMBER: _ClassVar[int]
    GUIDED_DECODING_FIELD_NUMBER: _ClassVar[int]
    HANDOFF_FIELD_NUMBER: _ClassVar[int]
    LEG_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    LORA_NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    cache_salt: str
    dp_rank: int
    guided_decoding: GuidedDecoding
    handoff: KvHandoff
    leg: DisaggregationLeg
    logprobs: int
    lora_name: str
    max_tokens: int
    model: str
    prompt_logprobs: int
    request_id: str
    sampling: SamplingParameters
    stop: StopConditions
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, request_id: _Optional[str] = ..., token_ids: _Optional[_Iterable[int]] = ..., sampling: _Optional[_Union[SamplingParameters, _Mapping]] = ..., max_tokens: _Optional[int] = ..., stop: _Optional[_Union[StopConditions, _Mapping]] = ..., model: _Optional[str] = ..., logprobs: _Optional[int] = ..., leg: _Optional[_Union[DisaggregationLeg, str]] = ..., handoff: _Optional[_Union[KvHandoff, _Mapping]] = ..., guided_decoding: _Optional[_Union[GuidedDecoding, _Mapping]] = ..., prompt_logprobs: _Optional[int] = ..., cache_salt: _Optional[str] = ..., lora_name: _Optional[str] = ..., dp_rank: _Optional[int] = ...) -> None: ...

class GenerateResponse(_message.Message):
    __slots__ = ["error_message", "finish_reason", "handoff", "logprobs", "prompt_logprobs", "text", "token_ids", "usage"]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    HANDOFF_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    error_message: str
    finish_reason: FinishReason
    handoff: KvHandoff
    logprobs: _containers.RepeatedCompositeFieldContainer[TokenLogprob]
    prompt_logprobs: _containers.RepeatedCompositeFieldContainer[TokenLogprob]
    text: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    usage: Usage
    def __init__(self, token_ids: _Optional[_Iterable[int]] = ..., text: _Optional[str] = ..., finish_reason: _Optional[_Union[FinishReason, str]] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., error_message: _Optional[str] = ..., logprobs: _Optional[_Iterable[_Union[TokenLogprob, _Mapping]]] = ..., handoff: _Optional[_Union[KvHandoff, _Mapping]] = ..., prompt_logprobs: _Optional[_Iterable[_Union[TokenLogprob, _Mapping]]] = ...) -> None: ...

class GetKvEventsRequest(_message.Message):
    __slots__ = ["dp_rank", "from_event_id", "max_events"]
    DP_RANK_FIELD_NUMBER: _ClassVar[int]
    FROM_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_EVENTS_FIELD_NUMBER: _ClassVar[int]
    dp_rank: int
    from_event_id: int
    max_events: int
    def __init__(self, dp_rank: _Optional[int] = ..., from_event_id: _Optional[int] = ..., max_events: _Optional[int] = ...) -> None: ...

class GetKvEventsResponse(_message.Message):
    __slots__ = ["batch", "last_event_id"]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    LAST_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    batch: KvEventBatch
    last_event_id: int
    def __init__(self, batch: _Optional[_Union[KvEventBatch, _Mapping]] = ..., last_event_id: _Optional[int] = ...) -> None: ...

class GetKvStateRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class GetKvStateResponse(_message.Message):
    __slots__ = ["dp_rank", "event_id", "instance_id", "last", "media", "sequence_hashes"]
    DP_RANK_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    MEDIA_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_HASHES_FIELD_NUMBER: _ClassVar[int]
    dp_rank: int
    event_id: int
    instance_id: int
    last: bool
    media: _containers.RepeatedScalarFieldContainer[KvMedium]
    sequence_hashes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, instance_id: _Optional[int] = ..., dp_rank: _Optional[int] = ..., event_id: _Optional[int] = ..., sequence_hashes: _Optional[_Iterable[int]] = ..., last: bool = ..., media: _Optional[_Iterable[_Union[KvMedium, str]]] = ...) -> None: ...

class GuidedDecoding(_message.Message):
    __slots__ = ["json_object", "json_schema", "name"]
    JSON_OBJECT_FIELD_NUMBER: _ClassVar[int]
    JSON_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    json_object: bool
    json_schema: str
    name: str
    def __init__(self, json_object: bool = ..., json_schema: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class KvBlock(_message.Message):
    __slots__ = ["local_hash", "sequence_hash"]
    LOCAL_HASH_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_HASH_FIELD_NUMBER: _ClassVar[int]
    local_hash: int
    sequence_hash: int
    def __init__(self, sequence_hash: _Optional[int] = ..., local_hash: _Optional[int] = ...) -> None: ...

class KvBlocksRemoved(_message.Message):
    __slots__ = ["medium", "sequence_hashes"]
    MEDIUM_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_HASHES_FIELD_NUMBER: _ClassVar[int]
    medium: KvMedium
    sequence_hashes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, sequence_hashes: _Optional[_Iterable[int]] = ..., medium: _Optional[_Union[KvMedium, str]] = ...) -> None: ...

class KvBlocksStored(_message.Message):
    __slots__ = ["blocks", "medium", "parent_sequence_hash"]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    MEDIUM_FIELD_NUMBER: _ClassVar[int]
    PARENT_SEQUENCE_HASH_FIELD_NUMBER: _ClassVar[int]
    blocks: _containers.RepeatedCompositeFieldContainer[KvBlock]
    medium: KvMedium
    parent_sequence_hash: int
    def __init__(self, parent_sequence_hash: _Optional[int] = ..., blocks: _Optional[_Iterable[_Union[KvBlock, _Mapping]]] = ..., medium: _Optional[_Union[KvMedium, str]] = ...) -> None: ...

class KvCacheCleared(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class KvCacheEvent(_message.Message):
    __slots__ = ["cleared", "removed", "stored"]
    CLEARED_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    cleared: KvCacheCleared
    removed: KvBlocksRemoved
    stored: KvBlocksStored
    def __init__(self, stored: _Optional[_Union[KvBlocksStored, _Mapping]] = ..., removed: _Optional[_Union[KvBlocksRemoved, _Mapping]] = ..., cleared: _Optional[_Union[KvCacheCleared, _Mapping]] = ...) -> None: ...

class KvEventBatch(_message.Message):
    __slots__ = ["dp_rank", "events", "first_event_id", "instance_id"]
    DP_RANK_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    FIRST_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    dp_rank: int
    events: _containers.RepeatedCompositeFieldContainer[KvCacheEvent]
    first_event_id: int
    instance_id: int
    def __init__(self, instance_id: _Optional[int] = ..., dp_rank: _Optional[int] = ..., first_event_id: _Optional[int] = ..., events: _Optional[_Iterable[_Union[KvCacheEvent, _Mapping]]] = ...) -> None: ...

class KvHandoff(_message.Message):
    __slots__ = ["first_token_id", "hold_ms", "kind", "payload", "prefill_instance_id"]
    FIRST_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    HOLD_MS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    PREFILL_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    first_token_id: int
    hold_ms: int
    kind: _common_pb2.KvTransferKind
    payload: bytes
    prefill_instance_id: int
    def __init__(self, kind: _Optional[_Union[_common_pb2.KvTransferKind, str]] = ..., payload: _Optional[bytes] = ..., prefill_instance_id: _Optional[int] = ..., first_token_id: _Optional[int] = ..., hold_ms: _Optional[int] = ...) -> None: ...

class LoadMetrics(_message.Message):
    __slots__ = ["active_decode_blocks", "active_prefill_tokens", "cached_prompt_tokens_total", "computed_prompt_requests_total", "dp_rank", "instance_id", "kv_blocks_total", "kv_blocks_used", "lora_adapters", "output_tokens_total", "prompt_tokens_total", "requests", "requests_total", "running_requests", "timestamp", "timing_model", "waiting_requests"]
    ACTIVE_DECODE_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_PREFILL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_PROMPT_TOKENS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    COMPUTED_PROMPT_REQUESTS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    DP_RANK_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_USED_FIELD_NUMBER: _ClassVar[int]
    LORA_ADAPTERS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    RUNNING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    TIMING_MODEL_FIELD_NUMBER: _ClassVar[int]
    WAITING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    active_decode_blocks: int
    active_prefill_tokens: int
    cached_prompt_tokens_total: int
    computed_prompt_requests_total: _containers.RepeatedScalarFieldContainer[int]
    dp_rank: int
    instance_id: int
    kv_blocks_total: int
    kv_blocks_used: int
    lora_adapters: _containers.RepeatedScalarFieldContainer[str]
    output_tokens_total: int
    prompt_tokens_total: int
    requests: _containers.RepeatedCompositeFieldContainer[RequestLoad]
    requests_total: int
    running_requests: int
    timestamp: _timestamp_pb2.Timestamp
    timing_model: TimingModel
    waiting_requests: int
    def __init__(self, instance_id: _Optional[int] = ..., dp_rank: _Optional[int] = ..., active_decode_blocks: _Optional[int] = ..., active_prefill_tokens: _Optional[int] = ..., kv_blocks_used: _Optional[int] = ..., kv_blocks_total: _Optional[int] = ..., waiting_requests: _Optional[int] = ..., running_requests: _Optional[int] = ..., timestamp: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., timing_model: _Optional[_Union[TimingModel, _Mapping]] = ..., requests: _Optional[_Iterable[_Union[RequestLoad, _Mapping]]] = ..., requests_total: _Optional[int] = ..., prompt_tokens_total: _Optional[int] = ..., output_tokens_total: _Optional[int] = ..., lora_adapters: _Optional[_Iterable[str]] = ..., cached_prompt_tokens_total: _Optional[int] = ..., computed_prompt_requests_total: _Optional[_Iterable[int]] = ...) -> None: ...

class MockKvHandoff(_message.Message):
    __slots__ = ["address", "blocks", "handoff_id"]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    HANDOFF_ID_FIELD_NUMBER: _ClassVar[int]
    address: str
    blocks: int
    handoff_id: str
    def __init__(self, handoff_id: _Optional[str] = ..., address: _Optional[str] = ..., blocks: _Optional[int] = ...) -> None: ...

class PullKvHandoffRequest(_message.Message):
    __slots__ = ["decode_instance_id", "handoff_id"]
    DECODE_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    HANDOFF_ID_FIELD_NUMBER: _ClassVar[int]
    decode_instance_id: int
    handoff_id: str
    def __init__(self, handoff_id: _Optional[str] = ..., decode_instance_id: _Optional[int] = ...) -> None: ...

class PullKvHandoffResponse(_message.Message):
    __slots__ = ["blocks"]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    blocks: int
    def __init__(self, blocks: _Optional[int] = ...) -> None: ...

class ReleaseKvHandoffRequest(_message.Message):
    __slots__ = ["handoff_id"]
    HANDOFF_ID_FIELD_NUMBER: _ClassVar[int]
    handoff_id: str
    def __init__(self, handoff_id: _Optional[str] = ...) -> None: ...

class ReleaseKvHandoffResponse(_message.Message):
    __slots__ = ["released"]
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    released: bool
    def __init__(self, released: bool = ...) -> None: ...

class RequestLoad(_message.Message):
    __slots__ = ["decode_blocks", "prefill_tokens", "request_id"]
    DECODE_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    PREFILL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    decode_blocks: int
    prefill_tokens: int
    request_id: str
    def __init__(self, request_id: _Optional[str] = ..., prefill_tokens: _Optional[int] = ..., decode_blocks: _Optional[int] = ...) -> None: ...

class SamplingParameters(_message.Message):
    __slots__ = ["frequency_penalty", "min_p", "presence_penalty", "repetition_penalty", "seed", "temperature", "top_k", "top_p"]
    FREQUENCY_PENALTY_FIELD_NUMBER: _ClassVar[int]
    MIN_P_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_PENALTY_FIELD_NUMBER: _ClassVar[int]
    REPETITION_PENALTY_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    frequency_penalty: float
    min_p: float
    presence_penalty: float
    repetition_penalty: float
    seed: int
    temperature: float
    top_k: int
    top_p: float
    def __init__(self, temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., top_k: _Optional[int] = ..., min_p: _Optional[float] = ..., seed: _Optional[int] = ..., frequency_penalty: _Optional[float] = ..., presence_penalty: _Optional[float] = ..., repetition_penalty: _Optional[float] = ...) -> None: ...

class StopConditions(_message.Message):
    __slots__ = ["ignore_eos", "min_tokens", "stop_strings", "stop_token_ids"]
    IGNORE_EOS_FIELD_NUMBER: _ClassVar[int]
    MIN_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STOP_STRINGS_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    ignore_eos: bool
    min_tokens: int
    stop_strings: _containers.RepeatedScalarFieldContainer[str]
    stop_token_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, stop_token_ids: _Optional[_Iterable[int]] = ..., ignore_eos: bool = ..., min_tokens: _Optional[int] = ..., stop_strings: _Optional[_Iterable[str]] = ...) -> None: ...

class TimingModel(_message.Message):
    __slots__ = ["cpu_load_ms_per_token", "decode_ms_base", "decode_ms_linear", "decode_ms_min", "decode_ms_quadratic", "disk_load_ms_per_token", "lora_load_ms", "max_batched_tokens", "max_num_seqs", "prefill_ms_per_batch", "prefill_ms_per_request", "prefill_ms_per_token", "prefill_ms_quadratic"]
    CPU_LOAD_MS_PER_TOKEN_FIELD_NUMBER: _ClassVar[int]
    DECODE_MS_BASE_FIELD_NUMBER: _ClassVar[int]
    DECODE_MS_LINEAR_FIELD_NUMBER: _ClassVar[int]
    DECODE_MS_MIN_FIELD_NUMBER: _ClassVar[int]
    DECODE_MS_QUADRATIC_FIELD_NUMBER: _ClassVar[int]
    DISK_LOAD_MS_PER_TOKEN_FIELD_NUMBER: _ClassVar[int]
    LORA_LOAD_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_SEQS_FIELD_NUMBER: _ClassVar[int]
    PREFILL_MS_PER_BATCH_FIELD_NUMBER: _ClassVar[int]
    PREFILL_MS_PER_REQUEST_FIELD_NUMBER: _ClassVar[int]
    PREFILL_MS_PER_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PREFILL_MS_QUADRATIC_FIELD_NUMBER: _ClassVar[int]
    cpu_load_ms_per_token: float
    decode_ms_base: float
    decode_ms_linear: float
    decode_ms_min: float
    decode_ms_quadratic: float
    disk_load_ms_per_token: float
    lora_load_ms: float
    max_batched_tokens: int
    max_num_seqs: int
    prefill_ms_per_batch: float
    prefill_ms_per_request: float
    prefill_ms_per_token: float
    prefill_ms_quadratic: float
    def __init__(self, prefill_ms_quadratic: _Optional[float] = ..., prefill_ms_per_token: _Optional[float] = ..., prefill_ms_per_batch: _Optional[float] = ..., decode_ms_quadratic: _Optional[float] = ..., decode_ms_linear: _Optional[float] = ..., decode_ms_base: _Optional[float] = ..., decode_ms_min: _Optional[float] = ..., max_batched_tokens: _Optional[int] = ..., lora_load_ms: _Optional[float] = ..., cpu_load_ms_per_token: _Optional[float] = ..., disk_load_ms_per_token: _Optional[float] = ..., max_num_seqs: _Optional[int] = ..., prefill_ms_per_request: _Optional[float] = ...) -> None: ...

class TokenLogprob(_message.Message):
    __slots__ = ["logprob", "top"]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    TOP_FIELD_NUMBER: _ClassVar[int]
    logprob: float
    top: _containers.RepeatedCompositeFieldContainer[TopLogprob]
    def __init__(self, logprob: _Optional[float] = ..., top: _Optional[_Iterable[_Union[TopLogprob, _Mapping]]] = ...) -> None: ...

class TopLogprob(_message.Message):
    __slots__ = ["logprob", "token_id"]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    logprob: float
    token_id: int
    def __init__(self, token_id: _Optional[int] = ..., logprob: _Optional[float] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ["cached_prompt_tokens", "completion_tokens", "prompt_tokens"]
    CACHED_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    cached_prompt_tokens: int
    completion_tokens: int
    prompt_tokens: int
    def __init__(self, prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., cached_prompt_tokens: _Optional[int] = ...) -> None: ...

class WatchKvEventsRequest(_message.Message):
    __slots__ = ["from_event_ids"]
    class FromEventIdsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    FROM_EVENT_IDS_FIELD_NUMBER: _ClassVar[int]
    from_event_ids: _containers.ScalarMap[int, int]
    def __init__(self, from_event_ids: _Optional[_Mapping[int, int]] = ...) -> None: ...

class WatchKvEventsResponse(_message.Message):
    __slots__ = ["batch"]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    batch: KvEventBatch
    def __init__(self, batch: _Optional[_Union[KvEventBatch, _Mapping]] = ...) -> None: ...

class DisaggregationLeg(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class FinishReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class KvMedium(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
