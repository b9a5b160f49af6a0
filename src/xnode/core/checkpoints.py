"""Signed checkpoints: an originator's commitment to its whole log.

A checkpoint names the originator, the tree size (its last sequence id), the root of the
RFC 9162 tree over its envelopes' leaf hashes (xnode.core.merkle), the originator's time and
the hash of the checkpoint before it, so the checkpoints of one originator form a chain anyone
can replay. The originator signs keccak256("checkpoint|" || unsigned bytes) with its node key.

A leaf commits to the content the originator signed and to its expiry (xnode.core.leaves,
format 2), so two different signed contents for one sequence id are two different leaves (a
fork). A checkpoint names the leaf format of its tree (`leaf_format`, 1 when absent):
checkpoints of two formats are never compared with each other. Chain payloads (originators 0
and 1) have no leaves: the chain is their commitment."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from xnode.core import merkle
from xnode.core.crypto import (
    SignatureError,
    SigningKey,
    checkpoint_digest,
    keccak256,
    recover_public_key,
)
from xnode.core.leaves import FORMAT_V1, FORMAT_V2, envelope_leaf
from xnode_api.logs.v1 import logs_pb2

FIRST_PREVIOUS = bytes(merkle.HASH_LENGTH)  # previous_hash of an originator's first checkpoint
FIRST_LOGGED_ORIGINATOR = 100  # 0 and 1 are the chain's; their commitment is the chain


class CheckpointError(ValueError):
    """A checkpoint that does not decode, is not signed by its originator, or does not follow."""


def has_log(originator_node_id: int) -> bool:
    return originator_node_id >= FIRST_LOGGED_ORIGINATOR


__all__ = ["envelope_leaf"]  # the leaf of an envelope, where checkpoints are used


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A signed checkpoint; `signed` is the serialized `xnode.logs.v1.Checkpoint`."""

    originator_node_id: int
    tree_size: int
    root: bytes
    originator_ns: int
    previous_hash: bytes
    signed: bytes
    leaf_format: int = FORMAT_V2
    topics: TopicCommitment | None = None  # per-topic commitments, when signed with them

    @property
    def hash(self) -> bytes:
        """What the next checkpoint's previous_hash must be."""
        return keccak256(self.signed)


@dataclass(frozen=True, slots=True)
class TopicCommitment:
    """The root of the originator's topic map (xnode.core.topic_map) over sequence ids
    first_sequence_id..tree_size."""

    map_root: bytes
    first_sequence_id: int = 1
    format: int = 1


def _unsigned(
    originator: int,
    tree_size: int,
    root: bytes,
    originator_ns: int,
    previous: bytes,
    topics: TopicCommitment | None,
) -> bytes:
    message = logs_pb2.UnsignedCheckpoint(
        originator_node_id=originator,
        tree_size=tree_size,
        root=root,
        originator_ns=originator_ns,
        previous_hash=previous,
        leaf_format=FORMAT_V2,
    )
    if topics is not None:
        message.topics.CopyFrom(
            logs_pb2.TopicCommitment(
                format=topics.format,
                map_root=topics.map_root,
                first_sequence_id=topics.first_sequence_id,
            )
        )
    return message.SerializeToString()


def sign_checkpoint(
    key: SigningKey,
    originator: int,
    tree_size: int,
    root: bytes,
    originator_ns: int,
    previous: Checkpoint | None,
    topics: TopicCommitment | None = None,
) -> Checkpoint:
    previous_hash = previous.hash if previous is not None else FIRST_PREVIOUS
    unsigned = _unsigned(originator, tree_size, root, originator_ns, previous_hash, topics)
    signature = key.sign(checkpoint_digest(unsigned))
    signed = logs_pb2.Checkpoint(unsigned_checkpoint=unsigned, signature=signature)
    return Checkpoint(
        originator,
        tree_size,
        root,
        originator_ns,
        previous_hash,
        signed.SerializeToString(),
        topics=topics,
    )


def parse_checkpoint(signed: bytes) -> tuple[Checkpoint, bytes, bytes]:
    """(checkpoint, unsigned bytes, signature); checks shapes, not the signature."""
    try:
        message = logs_pb2.Checkpoint.FromString(signed)
        unsigned = logs_pb2.UnsignedCheckpoint.FromString(message.unsigned_checkpoint)
    except DecodeError as exc:
        raise CheckpointError(f"checkpoint does not decode: {exc}") from None
    if len(unsigned.root) != merkle.HASH_LENGTH or len(unsigned.previous_hash) != (
        merkle.HASH_LENGTH
    ):
        raise CheckpointError("checkpoint root and previous_hash must be 32 bytes")
    topics = None
    if unsigned.HasField("topics"):
        commitment = unsigned.topics
        if len(commitment.map_root) != merkle.HASH_LENGTH:
            raise CheckpointError("a checkpoint's topic map root must be 32 bytes")
        topics = TopicCommitment(
            commitment.map_root, commitment.first_sequence_id, commitment.format
        )
    if not has_log(unsigned.originator_node_id) or unsigned.tree_size == 0:
        raise CheckpointError(
            f"no checkpoint for originator {unsigned.originator_node_id} "
            f"at tree size {unsigned.tree_size}"
        )
    checkpoint = Checkpoint(
        unsigned.originator_node_id,
        unsigned.tree_size,
        unsigned.root,
        unsigned.originator_ns,
        unsigned.previous_hash,
        signed,
        unsigned.leaf_format or FORMAT_V1,
        topics,
    )
    return checkpoint, message.unsigned_checkpoint, message.signature


def verify_checkpoint(signed: bytes, public_key: bytes) -> Checkpoint:
    """Decodes a checkpoint and checks that its originator's registry key signed it."""
    checkpoint, unsigned, signature = parse_checkpoint(signed)
    try:
        signer = recover_public_key(signature, checkpoint_digest(unsigned))
    except SignatureError as exc:
        raise CheckpointError(f"checkpoint signature: {exc}") from None
    if signer != public_key:
        raise CheckpointError(
            f"checkpoint of node {checkpoint.originator_node_id} at {checkpoint.tree_size} "
            "is not signed by that node's registry key"
        )
    return checkpoint


def check_follows(previous: Checkpoint | None, checkpoint: Checkpoint) -> None:
    """The previous-hash chain: `checkpoint` is the next one after `previous` (None: first)."""
    expected = previous.hash if previous is not None else FIRST_PREVIOUS
    if checkpoint.previous_hash != expected:
        raise CheckpointError(
            f"checkpoint at {checkpoint.tree_size} does not follow the one at "
            f"{previous.tree_size if previous else 0}"
        )
    if previous is not None and not (
        checkpoint.originator_node_id == previous.originator_node_id
        and checkpoint.tree_size > previous.tree_size
        and checkpoint.originator_ns > previous.originator_ns
    ):
        raise CheckpointError("a following checkpoint must grow the same originator's log")


def check_chain(checkpoints: Sequence[Checkpoint]) -> None:
    """A whole replayable history, oldest first, from the originator's first checkpoint."""
    previous = None
    for checkpoint in checkpoints:
        check_follows(previous, checkpoint)
        previous = checkpoint


def check_consistent(first: Checkpoint, second: Checkpoint, proof: Sequence[bytes]) -> None:
    """The log of `first` is a prefix of the log of `second` (raises merkle.ProofError)."""
    if first.originator_node_id != second.originator_node_id:
        raise CheckpointError("checkpoints of two originators cannot be consistent")
    if first.leaf_format != second.leaf_format:
        raise CheckpointError(
            f"checkpoints of leaf formats {first.leaf_format} and {second.leaf_format} "
            "commit to different leaves: they are not compared"
        )
    merkle.verify_consistency(first.tree_size, second.tree_size, proof, first.root, second.root)


def check_inclusion(
    checkpoint: Checkpoint, sequence_id: int, leaf: bytes, proof: Sequence[bytes]
) -> None:
    """The leaf of `sequence_id` is in the checkpoint's log (raises merkle.ProofError)."""
    merkle.verify_inclusion(leaf, sequence_id - 1, checkpoint.tree_size, proof, checkpoint.root)


def forked_version_covered(
    checkpoint: Checkpoint,
    sequence_id: int,
    proof: Sequence[bytes],
    other_leaves: Sequence[bytes],
) -> bytes | None:
    """Which of `other_leaves` (the versions of a forked `sequence_id` the log does not
    keep) the checkpoint's root covers, given the log's inclusion proof of that sequence id
    in a tree of the checkpoint's size (the siblings do not depend on the leaf itself): such
    a checkpoint commits to the other side of a fork, so it is evidence of the fork, not a
    root of this log. None when it covers none of them."""
    for leaf in other_leaves:
        try:
            check_inclusion(checkpoint, sequence_id, leaf, proof)
        except merkle.ProofError:
            continue
        return leaf
    return None
