from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AdmissionState(_message.Message):
    __slots__ = ["replica_id", "tenants"]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    replica_id: str
    tenants: _containers.RepeatedCompositeFieldContainer[TenantLoad]
    def __init__(self, replica_id: _Optional[str] = ..., tenants: _Optional[_Iterable[_Union[TenantLoad, _Mapping]]] = ...) -> None: ...

class TenantLoad(_message.Message):
    __slots__ = ["idle_seconds", "inflight_requests", "inflight_tokens", "model", "pending_requests", "prefilling_requests", "priority", "queued_requests", "request_rate", "served_tokens", "tenant"]
    IDLE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PENDING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    PREFILLING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    QUEUED_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_RATE_FIELD_NUMBER: _ClassVar[int]
    SERVED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    idle_seconds: float
    inflight_requests: int
    inflight_tokens: int
    model: str
    pending_requests: int
    prefilling_requests: int
    priority: int
    queued_requests: int
    request_rate: float
    served_tokens: float
    tenant: str
    def __init__(self, model: _Optional[str] = ..., tenant: _Optional[str] = ..., priority: _Optional[int] = ..., inflight_tokens: _Optional[int] = ..., inflight_requests: _Optional[int] = ..., queued_requests: _Optional[int] = ..., pending_requests: _Optional[int] = ..., served_tokens: _Optional[float] = ..., request_rate: _Optional[float] = ..., idle_seconds: _Optional[float] = ..., prefilling_requests: _Optional[int] = ...) -> None: ...
