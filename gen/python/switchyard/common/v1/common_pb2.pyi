from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
KV_TRANSFER_KIND_BOOTSTRAP: KvTransferKind
KV_TRANSFER_KIND_MOCK: KvTransferKind
KV_TRANSFER_KIND_MOONCAKE: KvTransferKind
KV_TRANSFER_KIND_NIXL: KvTransferKind
KV_TRANSFER_KIND_UNSPECIFIED: KvTransferKind
ROLE_AGG: Role
ROLE_DECODE: Role
ROLE_PREFILL: Role
ROLE_UNSPECIFIED: Role

class KvTransfer(_message.Message):
    __slots__ = ["address", "data_parallel_size", "engine_id", "kind"]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    DATA_PARALLEL_SIZE_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    address: str
    data_parallel_size: int
    engine_id: str
    kind: KvTransferKind
    def __init__(self, kind: _Optional[_Union[KvTransferKind, str]] = ..., engine_id: _Optional[str] = ..., address: _Optional[str] = ..., data_parallel_size: _Optional[int] = ...) -> None: ...

class Transport(_message.Message):
    __slots__ = ["http", "nats", "tcp"]
    HTTP_FIELD_NUMBER: _ClassVar[int]
    NATS_FIELD_NUMBER: _ClassVar[int]
    TCP_FIELD_NUMBER: _ClassVar[int]
    http: str
    nats: str
    tcp: str
    def __init__(self, tcp: _Optional[str] = ..., http: _Optional[str] = ..., nats: _Optional[str] = ...) -> None: ...

class Role(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class KvTransferKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
