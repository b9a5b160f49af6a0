from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class UnsignedCheckpoint(_message.Message):
    __slots__ = ("originator_node_id", "tree_size", "root", "originator_ns", "previous_hash", "leaf_format", "topics")
    ORIGINATOR_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    TREE_SIZE_FIELD_NUMBER: _ClassVar[int]
    ROOT_FIELD_NUMBER: _ClassVar[int]
    ORIGINATOR_NS_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_HASH_FIELD_NUMBER: _ClassVar[int]
    LEAF_FORMAT_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    originator_node_id: int
    tree_size: int
    root: bytes
    originator_ns: int
    previous_hash: bytes
    leaf_format: int
    topics: TopicCommitment
    def __init__(self, originator_node_id: _Optional[int] = ..., tree_size: _Optional[int] = ..., root: _Optional[bytes] = ..., originator_ns: _Optional[int] = ..., previous_hash: _Optional[bytes] = ..., leaf_format: _Optional[int] = ..., topics: _Optional[_Union[TopicCommitment, _Mapping]] = ...) -> None: ...

class TopicCommitment(_message.Message):
    __slots__ = ("format", "map_root", "first_sequence_id")
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    MAP_ROOT_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    format: int
    map_root: bytes
    first_sequence_id: int
    def __init__(self, format: _Optional[int] = ..., map_root: _Optional[bytes] = ..., first_sequence_id: _Optional[int] = ...) -> None: ...

class Checkpoint(_message.Message):
    __slots__ = ("unsigned_checkpoint", "signature")
    UNSIGNED_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    unsigned_checkpoint: bytes
    signature: bytes
    def __init__(self, unsigned_checkpoint: _Optional[bytes] = ..., signature: _Optional[bytes] = ...) -> None: ...

class SequenceRange(_message.Message):
    __slots__ = ("first", "last")
    FIRST_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    first: int
    last: int
    def __init__(self, first: _Optional[int] = ..., last: _Optional[int] = ...) -> None: ...

class GetCheckpointsRequest(_message.Message):
    __slots__ = ("originator_node_id", "after_sequence_id", "latest", "limit")
    ORIGINATOR_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    LATEST_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    originator_node_id: int
    after_sequence_id: int
    latest: bool
    limit: int
    def __init__(self, originator_node_id: _Optional[int] = ..., after_sequence_id: _Optional[int] = ..., latest: _Optional[bool] = ..., limit: _Optional[int] = ...) -> None: ...

class GetCheckpointsResponse(_message.Message):
    __slots__ = ("checkpoints",)
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    checkpoints: _containers.RepeatedCompositeFieldContainer[Checkpoint]
    def __init__(self, checkpoints: _Optional[_Iterable[_Union[Checkpoint, _Mapping]]] = ...) -> None: ...

class SubscribeCheckpointsRequest(_message.Message):
    __slots__ = ("originator_node_id", "after_sequence_id")
    ORIGINATOR_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    originator_node_id: int
    after_sequence_id: int
    def __init__(self, originator_node_id: _Optional[int] = ..., after_sequence_id: _Optional[int] = ...) -> None: ...

class SubscribeCheckpointsResponse(_message.Message):
    __slots__ = ("checkpoints",)
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    checkpoints: _containers.RepeatedCompositeFieldContainer[Checkpoint]
    def __init__(self, checkpoints: _Optional[_Iterable[_Union[Checkpoint, _Mapping]]] = ...) -> None: ...

class GetInclusionProofRequest(_message.Message):
    __slots__ = ("originator_node_id", "sequence_id", "tree_size")
    ORIGINATOR_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    TREE_SIZE_FIELD_NUMBER: _ClassVar[int]
    originator_node_id: int
    sequence_id: int
    tree_size: int
    def __init__(self, originator_node_id: _Optional[int] = ..., sequence_id: _Optional[int] = ..., tree_size: _Optional[int] = ...) -> None: ...

class GetInclusionProofResponse(_message.Message):
    __slots__ = ("leaf_hash", "tree_size", "proof", "checkpoint")
    LEAF_HASH_FIELD_NUMBER: _ClassVar[int]
    TREE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PROOF_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    leaf_hash: bytes
    tree_size: int
    proof: _containers.RepeatedScalarFieldContainer[bytes]
    checkpoint: Checkpoint
    def __init__(self, leaf_hash: _Optional[bytes] = ..., tree_size: _Optional[int] = ..., proof: _Optional[_Iterable[bytes]] = ..., checkpoint: _Optional[_Union[Checkpoint, _Mapping]] = ...) -> None: ...

class GetRunProofsRequest(_message.Message):
    __slots__ = ("originator_node_id", "tree_size", "runs")
    ORIGINATOR_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    TREE_SIZE_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    originator_node_id: int
    tree_size: int
    runs: _containers.RepeatedCompositeFieldContainer[SequenceRange]
    def __init__(self, originator_node_id: _Optional[int] = ..., tree_size: _Optional[int] = ..., runs: _Optional[_Iterable[_Union[SequenceRange, _Mapping]]] = ...) -> None: ...

class RunProof(_message.Message):
    __slots__ = ("first_proof", "last_proof")
    FIRST_PROOF_FIELD_NUMBER: _ClassVar[int]
    LAST_PROOF_FIELD_NUMBER: _ClassVar[int]
    first_proof: _containers.RepeatedScalarFieldContainer[bytes]
    last_proof: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, first_proof: _Optional[_Iterable[bytes]] = ..., last_proof: _Optional[_Iterable[bytes]] = ...) -> None: ...

class GetRunProofsResponse(_message.Message):
    __slots__ = ("tree_size", "proofs")
    TREE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PROOFS_FIELD_NUMBER: _ClassVar[int]
    tree_size: int
    proofs: _containers.RepeatedCompositeFieldContainer[RunProof]
    def __init__(self, tree_size: _Optional[int] = ..., proofs: _Optional[_Iterable[_Union[RunProof, _Mapping]]] = ...) -> None: ...

class GetConsistencyProofRequest(_message.Message):
    __slots__ = ("originator_node_id", "first_size", "second_size")
    ORIGINATOR_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_SIZE_FIELD_NUMBER: _ClassVar[int]
    SECOND_SIZE_FIELD_NUMBER: _ClassVar[int]
    originator_node_id: int
    first_size: int
    second_size: int
    def __init__(self, originator_node_id: _Optional[int] = ..., first_size: _Optional[int] = ..., second_size: _Optional[int] = ...) -> None: ...

class GetConsistencyProofResponse(_message.Message):
    __slots__ = ("proof",)
    PROOF_FIELD_NUMBER: _ClassVar[int]
    proof: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, proof: _Optional[_Iterable[bytes]] = ...) -> None: ...

class GetFingerprintsRequest(_message.Message):
    __slots__ = ("originator_node_id", "ranges")
    ORIGINATOR_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    RANGES_FIELD_NUMBER: _ClassVar[int]
    originator_node_id: int
    ranges: _containers.RepeatedCompositeFieldContainer[SequenceRange]
    def __init__(self, originator_node_id: _Optional[int] = ..., ranges: _Optional[_Iterable[_Union[SequenceRange, _Mapping]]] = ...) -> None: ...

class Fingerprint(_message.Message):
    __slots__ = ("count", "xor")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    XOR_FIELD_NUMBER: _ClassVar[int]
    count: int
    xor: int
    def __init__(self, count: _Optional[int] = ..., xor: _Optional[int] = ...) -> None: ...

class GetFingerprintsResponse(_message.Message):
    __slots__ = ("fingerprints",)
    FINGERPRINTS_FIELD_NUMBER: _ClassVar[int]
    fingerprints: _containers.RepeatedCompositeFieldContainer[Fingerprint]
    def __init__(self, fingerprints: _Optional[_Iterable[_Union[Fingerprint, _Mapping]]] = ...) -> None: ...

class GetLeavesRequest(_message.Message):
    __slots__ = ("originator_node_id", "ranges")
    ORIGINATOR_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    RANGES_FIELD_NUMBER: _ClassVar[int]
    originator_node_id: int
    ranges: _containers.RepeatedCompositeFieldContainer[SequenceRange]
    def __init__(self, originator_node_id: _Optional[int] = ..., ranges: _Optional[_Iterable[_Union[SequenceRange, _Mapping]]] = ...) -> None: ...

class Leaf(_message.Message):
    __slots__ = ("sequence_id", "leaf_hash")
    SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    LEAF_HASH_FIELD_NUMBER: _ClassVar[int]
    sequence_id: int
    leaf_hash: bytes
    def __init__(self, sequence_id: _Optional[int] = ..., leaf_hash: _Optional[bytes] = ...) -> None: ...

class GetLeavesResponse(_message.Message):
    __slots__ = ("leaves",)
    LEAVES_FIELD_NUMBER: _ClassVar[int]
    leaves: _containers.RepeatedCompositeFieldContainer[Leaf]
    def __init__(self, leaves: _Optional[_Iterable[_Union[Leaf, _Mapping]]] = ...) -> None: ...
