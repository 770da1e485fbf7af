from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class Transport(_message.Message):
    __slots__ = ["http", "nats", "tcp"]
    HTTP_FIELD_NUMBER: _ClassVar[int]
    NATS_FIELD_NUMBER: _ClassVar[int]
    TCP_FIELD_NUMBER: _ClassVar[int]
    http: str
    nats: str
    tcp: str
    def __init__(self, tcp: _Optional[str] = ..., http: _Optional[str] = ..., nats: _Optional[str] = ...) -> None: ...
