from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Fork(_message.Message):
    __slots__ = ("originator_node_id", "originator_sequence_id", "versions")
    ORIGINATOR_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ORIGINATOR_SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    originator_node_id: int
    originator_sequence_id: int
    versions: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, originator_node_id: _Optional[int] = ..., originator_sequence_id: _Optional[int] = ..., versions: _Optional[_Iterable[bytes]] = ...) -> None: ...

class QueryForksRequest(_message.Message):
    __slots__ = ("originator_node_id", "after_sequence_id", "limit")
    ORIGINATOR_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    originator_node_id: int
    after_sequence_id: int
    limit: int
    def __init__(self, originator_node_id: _Optional[int] = ..., after_sequence_id: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class QueryForksResponse(_message.Message):
    __slots__ = ("forks",)
    FORKS_FIELD_NUMBER: _ClassVar[int]
    forks: _containers.RepeatedCompositeFieldContainer[Fork]
    def __init__(self, forks: _Optional[_Iterable[_Union[Fork, _Mapping]]] = ...) -> None: ...

class GetForkDigestRequest(_message.Message):
    __slots__ = ("originator_node_id",)
    ORIGINATOR_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    originator_node_id: int
    def __init__(self, originator_node_id: _Optional[int] = ...) -> None: ...

class GetForkDigestResponse(_message.Message):
    __slots__ = ("versions", "digest")
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    versions: int
    digest: bytes
    def __init__(self, versions: _Optional[int] = ..., digest: _Optional[bytes] = ...) -> None: ...
