from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DELIVER_POLICY_ALL: DeliverPolicy
DELIVER_POLICY_BY_START_SEQUENCE: DeliverPolicy
DELIVER_POLICY_BY_START_TIME: DeliverPolicy
DELIVER_POLICY_NEW: DeliverPolicy
DELIVER_POLICY_UNSPECIFIED: DeliverPolicy
DESCRIPTOR: _descriptor.FileDescriptor

class AckRequest(_message.Message):
    __slots__ = ["ack_tokens", "nak"]
    ACK_TOKENS_FIELD_NUMBER: _ClassVar[int]
    NAK_FIELD_NUMBER: _ClassVar[int]
    ack_tokens: _containers.RepeatedScalarFieldContainer[str]
    nak: bool
    def __init__(self, ack_tokens: _Optional[_Iterable[str]] = ..., nak: bool = ...) -> None: ...

class AckResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class DeleteConsumerRequest(_message.Message):
    __slots__ = ["durable_name", "namespace"]
    DURABLE_NAME_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    durable_name: str
    namespace: str
    def __init__(self, namespace: _Optional[str] = ..., durable_name: _Optional[str] = ...) -> None: ...

class DeleteConsumerResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class DeleteObjectRequest(_message.Message):
    __slots__ = ["bucket", "name"]
    BUCKET_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    bucket: str
    name: str
    def __init__(self, bucket: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class DeleteObjectResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class DeliveredEvent(_message.Message):
    __slots__ = ["ack_token", "consumer_sequence", "headers", "msg_id", "num_delivered", "payload", "stream_sequence", "subject", "time"]
    class HeadersEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ACK_TOKEN_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    NUM_DELIVERED_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    STREAM_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    ack_token: str
    consumer_sequence: int
    headers: _containers.ScalarMap[str, str]
    msg_id: str
    num_delivered: int
    payload: bytes
    stream_sequence: int
    subject: str
    time: _timestamp_pb2.Timestamp
    def __init__(self, subject: _Optional[str] = ..., payload: _Optional[bytes] = ..., headers: _Optional[_Mapping[str, str]] = ..., msg_id: _Optional[str] = ..., stream_sequence: _Optional[int] = ..., consumer_sequence: _Optional[int] = ..., num_delivered: _Optional[int] = ..., time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., ack_token: _Optional[str] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ["headers", "msg_id", "payload", "subject"]
    class HeadersEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    headers: _containers.ScalarMap[str, str]
    msg_id: str
    payload: bytes
    subject: str
    def __init__(self, subject: _Optional[str] = ..., payload: _Optional[bytes] = ..., msg_id: _Optional[str] = ..., headers: _Optional[_Mapping[str, str]] = ...) -> None: ...

class GetObjectRequest(_message.Message):
    __slots__ = ["bucket", "name"]
    BUCKET_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    bucket: str
    name: str
    def __init__(self, bucket: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class GetObjectResponse(_message.Message):
    __slots__ = ["chunk", "info"]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    chunk: bytes
    info: ObjectInfo
    def __init__(self, info: _Optional[_Union[ObjectInfo, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class GetStreamInfoRequest(_message.Message):
    __slots__ = ["namespace"]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    def __init__(self, namespace: _Optional[str] = ...) -> None: ...

class GetStreamInfoResponse(_message.Message):
    __slots__ = ["bytes", "consumers", "first_sequence", "first_time", "last_sequence", "last_time", "messages", "num_subjects", "stream", "subjects"]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    FIRST_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    LAST_TIME_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    NUM_SUBJECTS_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    SUBJECTS_FIELD_NUMBER: _ClassVar[int]
    bytes: int
    consumers: int
    first_sequence: int
    first_time: _timestamp_pb2.Timestamp
    last_sequence: int
    last_time: _timestamp_pb2.Timestamp
    messages: int
    num_subjects: int
    stream: str
    subjects: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, stream: _Optional[str] = ..., subjects: _Optional[_Iterable[str]] = ..., messages: _Optional[int] = ..., bytes: _Optional[int] = ..., first_sequence: _Optional[int] = ..., last_sequence: _Optional[int] = ..., first_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., last_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., consumers: _Optional[int] = ..., num_subjects: _Optional[int] = ...) -> None: ...

class ListObjectsRequest(_message.Message):
    __slots__ = ["bucket"]
    BUCKET_FIELD_NUMBER: _ClassVar[int]
    bucket: str
    def __init__(self, bucket: _Optional[str] = ...) -> None: ...

class ListObjectsResponse(_message.Message):
    __slots__ = ["objects"]
    OBJECTS_FIELD_NUMBER: _ClassVar[int]
    objects: _containers.RepeatedCompositeFieldContainer[ObjectInfo]
    def __init__(self, objects: _Optional[_Iterable[_Union[ObjectInfo, _Mapping]]] = ...) -> None: ...

class ObjectInfo(_message.Message):
    __slots__ = ["bucket", "description", "metadata", "modified", "name", "sha256", "size"]
    class MetadataEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    BUCKET_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    MODIFIED_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    bucket: str
    description: str
    metadata: _containers.ScalarMap[str, str]
    modified: _timestamp_pb2.Timestamp
    name: str
    sha256: str
    size: int
    def __init__(self, bucket: _Optional[str] = ..., name: _Optional[str] = ..., description: _Optional[str] = ..., size: _Optional[int] = ..., sha256: _Optional[str] = ..., modified: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class PublishAck(_message.Message):
    __slots__ = ["duplicate", "sequence"]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    duplicate: bool
    sequence: int
    def __init__(self, sequence: _Optional[int] = ..., duplicate: bool = ...) -> None: ...

class PublishRequest(_message.Message):
    __slots__ = ["core", "event"]
    CORE_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    core: bool
    event: Event
    def __init__(self, event: _Optional[_Union[Event, _Mapping]] = ..., core: bool = ...) -> None: ...

class PublishResponse(_message.Message):
    __slots__ = ["duplicate", "sequence", "stream"]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    duplicate: bool
    sequence: int
    stream: str
    def __init__(self, stream: _Optional[str] = ..., sequence: _Optional[int] = ..., duplicate: bool = ...) -> None: ...

class PublishStreamRequest(_message.Message):
    __slots__ = ["batch_id", "core", "events"]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    CORE_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    batch_id: int
    core: bool
    events: _containers.RepeatedCompositeFieldContainer[Event]
    def __init__(self, batch_id: _Optional[int] = ..., events: _Optional[_Iterable[_Union[Event, _Mapping]]] = ..., core: bool = ...) -> None: ...

class PublishStreamResponse(_message.Message):
    __slots__ = ["acks", "batch_id", "publish_interval"]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    acks: _containers.RepeatedCompositeFieldContainer[PublishAck]
    batch_id: int
    publish_interval: _duration_pb2.Duration
    def __init__(self, batch_id: _Optional[int] = ..., acks: _Optional[_Iterable[_Union[PublishAck, _Mapping]]] = ..., publish_interval: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class PutObjectHeader(_message.Message):
    __slots__ = ["bucket", "description", "metadata", "name", "sha256"]
    class MetadataEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    BUCKET_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    bucket: str
    description: str
    metadata: _containers.ScalarMap[str, str]
    name: str
    sha256: str
    def __init__(self, bucket: _Optional[str] = ..., name: _Optional[str] = ..., description: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., sha256: _Optional[str] = ...) -> None: ...

class PutObjectRequest(_message.Message):
    __slots__ = ["chunk", "header"]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    HEADER_FIELD_NUMBER: _ClassVar[int]
    chunk: bytes
    header: PutObjectHeader
    def __init__(self, header: _Optional[_Union[PutObjectHeader, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class PutObjectResponse(_message.Message):
    __slots__ = ["info"]
    INFO_FIELD_NUMBER: _ClassVar[int]
    info: ObjectInfo
    def __init__(self, info: _Optional[_Union[ObjectInfo, _Mapping]] = ...) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ["ack_wait", "auto_ack", "bind", "core", "deliver_policy", "durable_name", "filter_subject", "max_ack_pending", "namespace", "start_sequence", "start_time"]
    ACK_WAIT_FIELD_NUMBER: _ClassVar[int]
    AUTO_ACK_FIELD_NUMBER: _ClassVar[int]
    BIND_FIELD_NUMBER: _ClassVar[int]
    CORE_FIELD_NUMBER: _ClassVar[int]
    DELIVER_POLICY_FIELD_NUMBER: _ClassVar[int]
    DURABLE_NAME_FIELD_NUMBER: _ClassVar[int]
    FILTER_SUBJECT_FIELD_NUMBER: _ClassVar[int]
    MAX_ACK_PENDING_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    START_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    ack_wait: _duration_pb2.Duration
    auto_ack: bool
    bind: bool
    core: bool
    deliver_policy: DeliverPolicy
    durable_name: str
    filter_subject: str
    max_ack_pending: int
    namespace: str
    start_sequence: int
    start_time: _timestamp_pb2.Timestamp
    def __init__(self, namespace: _Optional[str] = ..., filter_subject: _Optional[str] = ..., durable_name: _Optional[str] = ..., bind: bool = ..., deliver_policy: _Optional[_Union[DeliverPolicy, str]] = ..., start_sequence: _Optional[int] = ..., start_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., ack_wait: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., max_ack_pending: _Optional[int] = ..., auto_ack: bool = ..., core: bool = ...) -> None: ...

class SubscribeResponse(_message.Message):
    __slots__ = ["consumer", "events"]
    CONSUMER_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    consumer: str
    events: _containers.RepeatedCompositeFieldContainer[DeliveredEvent]
    def __init__(self, consumer: _Optional[str] = ..., events: _Optional[_Iterable[_Union[DeliveredEvent, _Mapping]]] = ...) -> None: ...

class DeliverPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
