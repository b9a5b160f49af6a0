"""Signed checkpoints: sign/verify round trips, the previous-hash chain, tampering fails."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xnode.core import merkle
from xnode.core.checkpoints import (
    FIRST_PREVIOUS,
    Checkpoint,
    CheckpointError,
    check_chain,
    check_consistent,
    check_follows,
    check_inclusion,
    forked_version_covered,
    parse_checkpoint,
    sign_checkpoint,
    verify_checkpoint,
)
from xnode.core.crypto import SigningKey, checkpoint_digest, keccak256
from xnode_api.logs.v1 import logs_pb2

KEY = SigningKey.generate()
OTHER = SigningKey.generate()
NODE = 100


def leaves(n: int) -> list[bytes]:
    return [merkle.leaf_hash(i.to_bytes(8, "big")) for i in range(n)]


def history(sizes: list[int], key: SigningKey = KEY) -> tuple[list[bytes], list[Checkpoint]]:
    all_leaves = leaves(max(sizes))
    out: list[Checkpoint] = []
    for i, size in enumerate(sizes):
        root = merkle.root_of(all_leaves[:size])
        out.append(sign_checkpoint(key, NODE, size, root, 1000 + i, out[-1] if out else None))
    return all_leaves, out


def perfect_of(all_leaves: list[bytes]) -> merkle.PerfectHashes:
    def perfect(level: int, index: int) -> bytes:
        return merkle.root_of(all_leaves[index << level : (index + 1) << level])

    return perfect


sizes = st.lists(st.integers(1, 300), min_size=1, max_size=6, unique=True).map(sorted)


@given(sizes)
@settings(max_examples=40, deadline=None)
def test_a_signed_history_verifies_and_chains(chosen: list[int]) -> None:
    all_leaves, checkpoints = history(chosen)
    verified = [verify_checkpoint(c.signed, KEY.public_key) for c in checkpoints]
    assert verified == checkpoints
    assert checkpoints[0].previous_hash == FIRST_PREVIOUS
    check_chain(verified)
    perfect = perfect_of(all_leaves)
    for first, second in itertools.pairwise(checkpoints):
        proof = merkle.consistency_proof(first.tree_size, second.tree_size, perfect)
        check_consistent(first, second, proof)
    last = checkpoints[-1]
    for index in range(0, last.tree_size, max(1, last.tree_size // 7)):
        proof = merkle.inclusion_proof(index, last.tree_size, perfect)
        check_inclusion(last, index + 1, all_leaves[index], proof)


def test_the_signature_is_over_the_checkpoint_label() -> None:
    _, [checkpoint] = history([5])
    _, unsigned, signature = parse_checkpoint(checkpoint.signed)
    assert KEY.sign(checkpoint_digest(unsigned)) == signature
    assert checkpoint_digest(unsigned) == keccak256(b"checkpoint|" + unsigned)


def test_another_key_does_not_verify() -> None:
    _, [checkpoint] = history([3], key=OTHER)
    with pytest.raises(CheckpointError, match="registry key"):
        verify_checkpoint(checkpoint.signed, KEY.public_key)


@given(st.integers(0, 200), st.integers(0, 7))
@settings(max_examples=60, deadline=None)
def test_any_flipped_bit_of_the_signed_content_fails(position: int, bit: int) -> None:
    _, [checkpoint] = history([9])
    message = logs_pb2.Checkpoint.FromString(checkpoint.signed)
    unsigned = bytearray(message.unsigned_checkpoint)
    unsigned[position % len(unsigned)] ^= 1 << bit
    message.unsigned_checkpoint = bytes(unsigned)
    with pytest.raises(CheckpointError):
        verify_checkpoint(message.SerializeToString(), KEY.public_key)


def test_a_broken_or_reordered_chain_fails() -> None:
    _, (a, b, c) = history([2, 4, 8])
    check_chain([a, b, c])
    with pytest.raises(CheckpointError):
        check_chain([a, c])  # b left out: c names b as previous
    with pytest.raises(CheckpointError):
        check_chain([b, c])  # b is not a first checkpoint
    with pytest.raises(CheckpointError):
        check_follows(b, a)


def test_a_fork_is_not_consistent() -> None:
    all_leaves, (first, _) = history([4, 8])
    forked = [*all_leaves[:8]]
    forked[2] = merkle.leaf_hash(b"other content for sequence id 3")
    fork = sign_checkpoint(KEY, NODE, 8, merkle.root_of(forked), 2000, first)
    check_follows(first, fork)  # the chain alone cannot tell; consistency does
    proof = merkle.consistency_proof(4, 8, perfect_of(forked))
    with pytest.raises(merkle.ProofError):
        check_consistent(first, fork, proof)


def test_chain_originators_and_empty_logs_have_no_checkpoints() -> None:
    for originator, size in [(0, 1), (1, 1), (NODE, 0)]:
        bad = sign_checkpoint(KEY, originator, size, bytes(32), 1, None)
        with pytest.raises(CheckpointError):
            parse_checkpoint(bad.signed)
    with pytest.raises(CheckpointError):
        parse_checkpoint(b"\xff\xff")


@given(st.integers(1, 40), st.data())
def test_a_checkpoint_over_the_other_version_of_a_fork_is_recognised(
    size: int, data: st.DataObject
) -> None:
    sequence_id = data.draw(st.integers(1, size))
    leaves = [merkle.leaf_hash(b"%d" % i) for i in range(size)]
    other = merkle.leaf_hash(b"other")
    theirs = [*leaves]
    theirs[sequence_id - 1] = other
    over_other = sign_checkpoint(KEY, 100, size, merkle.root_of(theirs), 1, None)
    over_log = sign_checkpoint(KEY, 100, size, merkle.root_of(leaves), 1, None)

    def perfect(level: int, index: int) -> bytes:
        return merkle.root_of(leaves[index << level : (index + 1) << level])

    proof = merkle.inclusion_proof(sequence_id - 1, size, perfect)
    decoy = merkle.leaf_hash(b"decoy")
    assert forked_version_covered(over_other, sequence_id, proof, [decoy, other]) == other
    assert forked_version_covered(over_other, sequence_id, proof, [decoy]) is None
    assert forked_version_covered(over_log, sequence_id, proof, [other]) is None


def test_checkpoints_name_their_leaf_format_and_formats_are_never_compared() -> None:
    tree = leaves(4)
    signed = sign_checkpoint(KEY, NODE, 4, merkle.root_of(tree), 4, None)
    assert signed.leaf_format == 2
    assert parse_checkpoint(signed.signed)[0].leaf_format == 2
    unsigned = logs_pb2.UnsignedCheckpoint(
        originator_node_id=NODE,
        tree_size=2,
        root=merkle.root_of(tree[:2]),
        originator_ns=2,
        previous_hash=FIRST_PREVIOUS,
    ).SerializeToString()  # as signed before leaf format 2: no leaf_format field
    old = logs_pb2.Checkpoint(
        unsigned_checkpoint=unsigned, signature=KEY.sign(checkpoint_digest(unsigned))
    ).SerializeToString()
    format_1 = verify_checkpoint(old, KEY.public_key)
    assert format_1.leaf_format == 1
    proof = merkle.consistency_proof(
        2, 4, lambda level, index: merkle.root_of(tree[index << level : (index + 1) << level])
    )
    check_consistent(dataclasses.replace(format_1, leaf_format=2), signed, proof)  # same trees
    with pytest.raises(CheckpointError, match="leaf formats 1 and 2"):
        check_consistent(format_1, signed, proof)
