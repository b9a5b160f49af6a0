from xmtp.xmtpv4.envelopes import envelopes_pb2 as _envelopes_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PublishClientEnvelopesRequest(_message.Message):
    __slots__ = ("envelopes",)
    ENVELOPES_FIELD_NUMBER: _ClassVar[int]
    envelopes: _containers.RepeatedCompositeFieldContainer[_envelopes_pb2.ClientEnvelope]
    def __init__(self, envelopes: _Optional[_Iterable[_Union[_envelopes_pb2.ClientEnvelope, _Mapping]]] = ...) -> None: ...

class PublishClientEnvelopesResponse(_message.Message):
    __slots__ = ("originator_envelopes",)
    ORIGINATOR_ENVELOPES_FIELD_NUMBER: _ClassVar[int]
    originator_envelopes: _containers.RepeatedCompositeFieldContainer[_envelopes_pb2.OriginatorEnvelope]
    def __init__(self, originator_envelopes: _Optional[_Iterable[_Union[_envelopes_pb2.OriginatorEnvelope, _Mapping]]] = ...) -> None: ...

class GetNodesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetNodesResponse(_message.Message):
    __slots__ = ("nodes",)
    class NodesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: str
        def __init__(self, key: _Optional[int] = ..., value: _Optional[str] = ...) -> None: ...
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.ScalarMap[int, str]
    def __init__(self, nodes: _Optional[_Mapping[int, str]] = ...) -> None: ...
