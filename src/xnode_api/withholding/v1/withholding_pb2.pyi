from xnode_api.completeness.v1 import completeness_pb2 as _completeness_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ExtendedMisbehavior(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXTENDED_MISBEHAVIOR_UNSPECIFIED: _ClassVar[ExtendedMisbehavior]
    MISBEHAVIOR_WITHHOLDING: _ClassVar[ExtendedMisbehavior]
    MISBEHAVIOR_WITHHOLDING_ACCUSATION: _ClassVar[ExtendedMisbehavior]
    MISBEHAVIOR_SPLIT_VIEW: _ClassVar[ExtendedMisbehavior]
    MISBEHAVIOR_OMISSION: _ClassVar[ExtendedMisbehavior]
EXTENDED_MISBEHAVIOR_UNSPECIFIED: ExtendedMisbehavior
MISBEHAVIOR_WITHHOLDING: ExtendedMisbehavior
MISBEHAVIOR_WITHHOLDING_ACCUSATION: ExtendedMisbehavior
MISBEHAVIOR_SPLIT_VIEW: ExtendedMisbehavior
MISBEHAVIOR_OMISSION: ExtendedMisbehavior

class ExpiredLeaf(_message.Message):
    __slots__ = ("sequence_id", "expiry_unixtime", "content_hash")
    SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    EXPIRY_UNIXTIME_FIELD_NUMBER: _ClassVar[int]
    CONTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    sequence_id: int
    expiry_unixtime: int
    content_hash: bytes
    def __init__(self, sequence_id: _Optional[int] = ..., expiry_unixtime: _Optional[int] = ..., content_hash: _Optional[bytes] = ...) -> None: ...

class Question(_message.Message):
    __slots__ = ("asker_node_id", "originator_node_id", "first", "last", "asked_ns")
    ASKER_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ORIGINATOR_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    ASKED_NS_FIELD_NUMBER: _ClassVar[int]
    asker_node_id: int
    originator_node_id: int
    first: int
    last: int
    asked_ns: int
    def __init__(self, asker_node_id: _Optional[int] = ..., originator_node_id: _Optional[int] = ..., first: _Optional[int] = ..., last: _Optional[int] = ..., asked_ns: _Optional[int] = ...) -> None: ...

class SignedQuestion(_message.Message):
    __slots__ = ("unsigned_question", "signature")
    UNSIGNED_QUESTION_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    unsigned_question: bytes
    signature: bytes
    def __init__(self, unsigned_question: _Optional[bytes] = ..., signature: _Optional[bytes] = ...) -> None: ...

class UnsignedHoldings(_message.Message):
    __slots__ = ("originator_node_id", "first", "last", "log_size", "answered_ns", "envelopes", "expired", "unprovable", "question_hash")
    ORIGINATOR_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    LOG_SIZE_FIELD_NUMBER: _ClassVar[int]
    ANSWERED_NS_FIELD_NUMBER: _ClassVar[int]
    ENVELOPES_FIELD_NUMBER: _ClassVar[int]
    EXPIRED_FIELD_NUMBER: _ClassVar[int]
    UNPROVABLE_FIELD_NUMBER: _ClassVar[int]
    QUESTION_HASH_FIELD_NUMBER: _ClassVar[int]
    originator_node_id: int
    first: int
    last: int
    log_size: int
    answered_ns: int
    envelopes: _containers.RepeatedScalarFieldContainer[bytes]
    expired: _containers.RepeatedCompositeFieldContainer[ExpiredLeaf]
    unprovable: _containers.RepeatedScalarFieldContainer[int]
    question_hash: bytes
    def __init__(self, originator_node_id: _Optional[int] = ..., first: _Optional[int] = ..., last: _Optional[int] = ..., log_size: _Optional[int] = ..., answered_ns: _Optional[int] = ..., envelopes: _Optional[_Iterable[bytes]] = ..., expired: _Optional[_Iterable[_Union[ExpiredLeaf, _Mapping]]] = ..., unprovable: _Optional[_Iterable[int]] = ..., question_hash: _Optional[bytes] = ...) -> None: ...

class SignedHoldings(_message.Message):
    __slots__ = ("unsigned_holdings", "signature")
    UNSIGNED_HOLDINGS_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    unsigned_holdings: bytes
    signature: bytes
    def __init__(self, unsigned_holdings: _Optional[bytes] = ..., signature: _Optional[bytes] = ...) -> None: ...

class GetSignedHoldingsRequest(_message.Message):
    __slots__ = ("originator_node_id", "first", "last", "question")
    ORIGINATOR_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    originator_node_id: int
    first: int
    last: int
    question: SignedQuestion
    def __init__(self, originator_node_id: _Optional[int] = ..., first: _Optional[int] = ..., last: _Optional[int] = ..., question: _Optional[_Union[SignedQuestion, _Mapping]] = ...) -> None: ...

class GetSignedHoldingsResponse(_message.Message):
    __slots__ = ("holdings",)
    HOLDINGS_FIELD_NUMBER: _ClassVar[int]
    holdings: SignedHoldings
    def __init__(self, holdings: _Optional[_Union[SignedHoldings, _Mapping]] = ...) -> None: ...

class LeafOpening(_message.Message):
    __slots__ = ("expiry_unixtime", "content_hash")
    EXPIRY_UNIXTIME_FIELD_NUMBER: _ClassVar[int]
    CONTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    expiry_unixtime: int
    content_hash: bytes
    def __init__(self, expiry_unixtime: _Optional[int] = ..., content_hash: _Optional[bytes] = ...) -> None: ...

class Commitment(_message.Message):
    __slots__ = ("checkpoint", "sequence_id", "leaf_hash", "inclusion_proof", "opening")
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    LEAF_HASH_FIELD_NUMBER: _ClassVar[int]
    INCLUSION_PROOF_FIELD_NUMBER: _ClassVar[int]
    OPENING_FIELD_NUMBER: _ClassVar[int]
    checkpoint: bytes
    sequence_id: int
    leaf_hash: bytes
    inclusion_proof: _containers.RepeatedScalarFieldContainer[bytes]
    opening: LeafOpening
    def __init__(self, checkpoint: _Optional[bytes] = ..., sequence_id: _Optional[int] = ..., leaf_hash: _Optional[bytes] = ..., inclusion_proof: _Optional[_Iterable[bytes]] = ..., opening: _Optional[_Union[LeafOpening, _Mapping]] = ...) -> None: ...

class WithholdingProof(_message.Message):
    __slots__ = ("commitment", "holdings", "question", "appended_after")
    COMMITMENT_FIELD_NUMBER: _ClassVar[int]
    HOLDINGS_FIELD_NUMBER: _ClassVar[int]
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    APPENDED_AFTER_FIELD_NUMBER: _ClassVar[int]
    commitment: Commitment
    holdings: SignedHoldings
    question: SignedQuestion
    appended_after: bytes
    def __init__(self, commitment: _Optional[_Union[Commitment, _Mapping]] = ..., holdings: _Optional[_Union[SignedHoldings, _Mapping]] = ..., question: _Optional[_Union[SignedQuestion, _Mapping]] = ..., appended_after: _Optional[bytes] = ...) -> None: ...

class WithholdingAccusation(_message.Message):
    __slots__ = ("commitment", "answer", "asked_ns")
    COMMITMENT_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    ASKED_NS_FIELD_NUMBER: _ClassVar[int]
    commitment: Commitment
    answer: str
    asked_ns: int
    def __init__(self, commitment: _Optional[_Union[Commitment, _Mapping]] = ..., answer: _Optional[str] = ..., asked_ns: _Optional[int] = ...) -> None: ...

class SplitView(_message.Message):
    __slots__ = ("first", "second")
    FIRST_FIELD_NUMBER: _ClassVar[int]
    SECOND_FIELD_NUMBER: _ClassVar[int]
    first: Commitment
    second: Commitment
    def __init__(self, first: _Optional[_Union[Commitment, _Mapping]] = ..., second: _Optional[_Union[Commitment, _Mapping]] = ...) -> None: ...

class ExtendedMisbehaviorReport(_message.Message):
    __slots__ = ("reporter_time_ns", "misbehaving_node_id", "type", "submitted_by_node", "withholding", "withholding_accusation", "split_view", "omission", "rule_epoch")
    REPORTER_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    MISBEHAVING_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_BY_NODE_FIELD_NUMBER: _ClassVar[int]
    WITHHOLDING_FIELD_NUMBER: _ClassVar[int]
    WITHHOLDING_ACCUSATION_FIELD_NUMBER: _ClassVar[int]
    SPLIT_VIEW_FIELD_NUMBER: _ClassVar[int]
    OMISSION_FIELD_NUMBER: _ClassVar[int]
    RULE_EPOCH_FIELD_NUMBER: _ClassVar[int]
    reporter_time_ns: int
    misbehaving_node_id: int
    type: ExtendedMisbehavior
    submitted_by_node: bool
    withholding: WithholdingProof
    withholding_accusation: WithholdingAccusation
    split_view: SplitView
    omission: _completeness_pb2.SignedAnswer
    rule_epoch: int
    def __init__(self, reporter_time_ns: _Optional[int] = ..., misbehaving_node_id: _Optional[int] = ..., type: _Optional[_Union[ExtendedMisbehavior, str]] = ..., submitted_by_node: _Optional[bool] = ..., withholding: _Optional[_Union[WithholdingProof, _Mapping]] = ..., withholding_accusation: _Optional[_Union[WithholdingAccusation, _Mapping]] = ..., split_view: _Optional[_Union[SplitView, _Mapping]] = ..., omission: _Optional[_Union[_completeness_pb2.SignedAnswer, _Mapping]] = ..., rule_epoch: _Optional[int] = ...) -> None: ...
