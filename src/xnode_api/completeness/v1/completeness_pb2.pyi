from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MapProof(_message.Message):
    __slots__ = ("depth", "bitmap", "siblings", "leaf_key", "leaf_value")
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    BITMAP_FIELD_NUMBER: _ClassVar[int]
    SIBLINGS_FIELD_NUMBER: _ClassVar[int]
    LEAF_KEY_FIELD_NUMBER: _ClassVar[int]
    LEAF_VALUE_FIELD_NUMBER: _ClassVar[int]
    depth: int
    bitmap: bytes
    siblings: _containers.RepeatedScalarFieldContainer[bytes]
    leaf_key: bytes
    leaf_value: bytes
    def __init__(self, depth: _Optional[int] = ..., bitmap: _Optional[bytes] = ..., siblings: _Optional[_Iterable[bytes]] = ..., leaf_key: _Optional[bytes] = ..., leaf_value: _Optional[bytes] = ...) -> None: ...

class TopicEntry(_message.Message):
    __slots__ = ("sequence_id", "expiry_unixtime", "content_hash")
    SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    EXPIRY_UNIXTIME_FIELD_NUMBER: _ClassVar[int]
    CONTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    sequence_id: int
    expiry_unixtime: int
    content_hash: bytes
    def __init__(self, sequence_id: _Optional[int] = ..., expiry_unixtime: _Optional[int] = ..., content_hash: _Optional[bytes] = ...) -> None: ...

class TopicProof(_message.Message):
    __slots__ = ("topic", "map_proof", "log_size", "log_root", "start", "entries", "first_path", "last_path")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MAP_PROOF_FIELD_NUMBER: _ClassVar[int]
    LOG_SIZE_FIELD_NUMBER: _ClassVar[int]
    LOG_ROOT_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    FIRST_PATH_FIELD_NUMBER: _ClassVar[int]
    LAST_PATH_FIELD_NUMBER: _ClassVar[int]
    topic: bytes
    map_proof: MapProof
    log_size: int
    log_root: bytes
    start: int
    entries: _containers.RepeatedCompositeFieldContainer[TopicEntry]
    first_path: _containers.RepeatedScalarFieldContainer[bytes]
    last_path: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, topic: _Optional[bytes] = ..., map_proof: _Optional[_Union[MapProof, _Mapping]] = ..., log_size: _Optional[int] = ..., log_root: _Optional[bytes] = ..., start: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[TopicEntry, _Mapping]]] = ..., first_path: _Optional[_Iterable[bytes]] = ..., last_path: _Optional[_Iterable[bytes]] = ...) -> None: ...

class UnsignedAnswer(_message.Message):
    __slots__ = ("node_id", "originator_node_id", "topic", "after_sequence_id", "checkpoint", "proof", "envelopes", "answered_ns")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ORIGINATOR_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    PROOF_FIELD_NUMBER: _ClassVar[int]
    ENVELOPES_FIELD_NUMBER: _ClassVar[int]
    ANSWERED_NS_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    originator_node_id: int
    topic: bytes
    after_sequence_id: int
    checkpoint: bytes
    proof: TopicProof
    envelopes: _containers.RepeatedScalarFieldContainer[bytes]
    answered_ns: int
    def __init__(self, node_id: _Optional[int] = ..., originator_node_id: _Optional[int] = ..., topic: _Optional[bytes] = ..., after_sequence_id: _Optional[int] = ..., checkpoint: _Optional[bytes] = ..., proof: _Optional[_Union[TopicProof, _Mapping]] = ..., envelopes: _Optional[_Iterable[bytes]] = ..., answered_ns: _Optional[int] = ...) -> None: ...

class SignedAnswer(_message.Message):
    __slots__ = ("unsigned_answer", "signature")
    UNSIGNED_ANSWER_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    unsigned_answer: bytes
    signature: bytes
    def __init__(self, unsigned_answer: _Optional[bytes] = ..., signature: _Optional[bytes] = ...) -> None: ...

class TopicCursor(_message.Message):
    __slots__ = ("topic", "after_sequence_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    topic: bytes
    after_sequence_id: int
    def __init__(self, topic: _Optional[bytes] = ..., after_sequence_id: _Optional[int] = ...) -> None: ...

class ProveTopicsRequest(_message.Message):
    __slots__ = ("originator_node_id", "topics")
    ORIGINATOR_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    originator_node_id: int
    topics: _containers.RepeatedCompositeFieldContainer[TopicCursor]
    def __init__(self, originator_node_id: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[TopicCursor, _Mapping]]] = ...) -> None: ...

class ProveTopicsResponse(_message.Message):
    __slots__ = ("answers",)
    ANSWERS_FIELD_NUMBER: _ClassVar[int]
    answers: _containers.RepeatedCompositeFieldContainer[SignedAnswer]
    def __init__(self, answers: _Optional[_Iterable[_Union[SignedAnswer, _Mapping]]] = ...) -> None: ...
