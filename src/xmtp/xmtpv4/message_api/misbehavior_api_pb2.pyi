from xmtp.identity.associations import signature_pb2 as _signature_pb2
from xmtp.xmtpv4.envelopes import envelopes_pb2 as _envelopes_pb2
from xmtp.xmtpv4.message_api import message_api_pb2 as _message_api_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Misbehavior(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MISBEHAVIOR_UNSPECIFIED: _ClassVar[Misbehavior]
    MISBEHAVIOR_UNRESPONSIVE_NODE: _ClassVar[Misbehavior]
    MISBEHAVIOR_SLOW_NODE: _ClassVar[Misbehavior]
    MISBEHAVIOR_FAILED_REQUEST: _ClassVar[Misbehavior]
    MISBEHAVIOR_OUT_OF_ORDER: _ClassVar[Misbehavior]
    MISBEHAVIOR_DUPLICATE_SEQUENCE_ID: _ClassVar[Misbehavior]
    MISBEHAVIOR_CAUSAL_ORDERING: _ClassVar[Misbehavior]
    MISBEHAVIOR_INVALID_PAYLOAD: _ClassVar[Misbehavior]
    MISBEHAVIOR_BLOCKCHAIN_INCONSISTENCY: _ClassVar[Misbehavior]
MISBEHAVIOR_UNSPECIFIED: Misbehavior
MISBEHAVIOR_UNRESPONSIVE_NODE: Misbehavior
MISBEHAVIOR_SLOW_NODE: Misbehavior
MISBEHAVIOR_FAILED_REQUEST: Misbehavior
MISBEHAVIOR_OUT_OF_ORDER: Misbehavior
MISBEHAVIOR_DUPLICATE_SEQUENCE_ID: Misbehavior
MISBEHAVIOR_CAUSAL_ORDERING: Misbehavior
MISBEHAVIOR_INVALID_PAYLOAD: Misbehavior
MISBEHAVIOR_BLOCKCHAIN_INCONSISTENCY: Misbehavior

class LivenessFailure(_message.Message):
    __slots__ = ("response_time_ns", "subscribe", "query", "publish")
    RESPONSE_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBE_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_FIELD_NUMBER: _ClassVar[int]
    response_time_ns: int
    subscribe: _message_api_pb2.SubscribeEnvelopesRequest
    query: _message_api_pb2.QueryEnvelopesRequest
    publish: _message_api_pb2.PublishPayerEnvelopesRequest
    def __init__(self, response_time_ns: _Optional[int] = ..., subscribe: _Optional[_Union[_message_api_pb2.SubscribeEnvelopesRequest, _Mapping]] = ..., query: _Optional[_Union[_message_api_pb2.QueryEnvelopesRequest, _Mapping]] = ..., publish: _Optional[_Union[_message_api_pb2.PublishPayerEnvelopesRequest, _Mapping]] = ...) -> None: ...

class SafetyFailure(_message.Message):
    __slots__ = ("envelopes",)
    ENVELOPES_FIELD_NUMBER: _ClassVar[int]
    envelopes: _containers.RepeatedCompositeFieldContainer[_envelopes_pb2.OriginatorEnvelope]
    def __init__(self, envelopes: _Optional[_Iterable[_Union[_envelopes_pb2.OriginatorEnvelope, _Mapping]]] = ...) -> None: ...

class UnsignedMisbehaviorReport(_message.Message):
    __slots__ = ("reporter_time_ns", "misbehaving_node_id", "type", "liveness", "safety", "submitted_by_node")
    REPORTER_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    MISBEHAVING_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    LIVENESS_FIELD_NUMBER: _ClassVar[int]
    SAFETY_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_BY_NODE_FIELD_NUMBER: _ClassVar[int]
    reporter_time_ns: int
    misbehaving_node_id: int
    type: Misbehavior
    liveness: LivenessFailure
    safety: SafetyFailure
    submitted_by_node: bool
    def __init__(self, reporter_time_ns: _Optional[int] = ..., misbehaving_node_id: _Optional[int] = ..., type: _Optional[_Union[Misbehavior, str]] = ..., liveness: _Optional[_Union[LivenessFailure, _Mapping]] = ..., safety: _Optional[_Union[SafetyFailure, _Mapping]] = ..., submitted_by_node: _Optional[bool] = ...) -> None: ...

class MisbehaviorReport(_message.Message):
    __slots__ = ("server_time_ns", "unsigned_misbehavior_report", "signature")
    SERVER_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    UNSIGNED_MISBEHAVIOR_REPORT_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    server_time_ns: int
    unsigned_misbehavior_report: bytes
    signature: _signature_pb2.RecoverableEcdsaSignature
    def __init__(self, server_time_ns: _Optional[int] = ..., unsigned_misbehavior_report: _Optional[bytes] = ..., signature: _Optional[_Union[_signature_pb2.RecoverableEcdsaSignature, _Mapping]] = ...) -> None: ...

class SubmitMisbehaviorReportRequest(_message.Message):
    __slots__ = ("report",)
    REPORT_FIELD_NUMBER: _ClassVar[int]
    report: UnsignedMisbehaviorReport
    def __init__(self, report: _Optional[_Union[UnsignedMisbehaviorReport, _Mapping]] = ...) -> None: ...

class SubmitMisbehaviorReportResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class QueryMisbehaviorReportsRequest(_message.Message):
    __slots__ = ("after_ns",)
    AFTER_NS_FIELD_NUMBER: _ClassVar[int]
    after_ns: int
    def __init__(self, after_ns: _Optional[int] = ...) -> None: ...

class QueryMisbehaviorReportsResponse(_message.Message):
    __slots__ = ("reports",)
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    reports: _containers.RepeatedCompositeFieldContainer[MisbehaviorReport]
    def __init__(self, reports: _Optional[_Iterable[_Union[MisbehaviorReport, _Mapping]]] = ...) -> None: ...
