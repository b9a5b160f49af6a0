"""Checkpoints and forks on a real Postgres (issue 9 part 4): which checkpoints a node
accepts does not depend on whether a checkpoint came before or after the fork. One whose
root covers the version the fork rule drops is kept aside as evidence of the fork; one over
the version the rule keeps is accepted."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from xnode.client.node import group_message_envelope
from xnode.core import merkle
from xnode.core.checkpoints import Checkpoint, envelope_leaf, sign_checkpoint
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import (
    IndexedEnvelope,
    build_payer_envelope,
    originate,
    validate_payer_envelope,
)
from xnode.core.forks import log_keeps
from xnode.store.logs import LogStore
from xnode.store.replication import ReplicationStore
from xnode.usecases.logs import CheckpointIntake

PEER = 200
KEY = SigningKey.generate()
PAYER = SigningKey.generate()


def envelope(seq: int, text: bytes) -> IndexedEnvelope:
    payer = build_payer_envelope(group_message_envelope(b"g" * 16, text), PAYER, PEER)
    return originate(validate_payer_envelope(payer, PEER), PEER, seq, 1000 + seq, KEY)


LOG = [envelope(s, b"%d" % s) for s in range(1, 5)]
OTHER = envelope(3, b"other")
KEPT, DROPPED = (
    (OTHER, LOG[2]) if log_keeps(LOG[2].raw, OTHER.raw) == OTHER.raw else (LOG[2], OTHER)
)


def checkpoint_over(version: IndexedEnvelope) -> Checkpoint:
    """The originator's checkpoint at 4 over its log with `version` at sequence id 3."""
    leaves = [envelope_leaf(e.raw) for e in (LOG[0], LOG[1], version, LOG[3])]
    return sign_checkpoint(KEY, PEER, 4, merkle.root_of(leaves), 10, None)


@pytest.fixture
async def pool(database: str) -> AsyncIterator[asyncpg.Pool]:
    async with asyncpg.create_pool(database, min_size=1, max_size=4) as created:
        yield created


async def no_proof(first: int, second: int) -> list[bytes]:
    raise AssertionError("no consistency proof expected")


async def fork_then_checkpoint(pool: asyncpg.Pool, checkpoint: Checkpoint) -> CheckpointIntake:
    store, intake = ReplicationStore(pool), CheckpointIntake(LogStore(pool))
    await store.insert_received(LOG, "t")
    [fork] = await store.resolve_forks([OTHER])
    assert fork is not None
    await intake.receive(checkpoint.signed, KEY.public_key, no_proof, PEER)
    return intake


async def checkpoint_then_fork(pool: asyncpg.Pool, checkpoint: Checkpoint) -> CheckpointIntake:
    """The log holds the originator's version of 3 when its checkpoint comes, and the other
    version arrives after it (what replication.ingest does: resolve, then settle)."""
    ours = checkpoint.root == checkpoint_over(LOG[2]).root
    first, second = (LOG[2], OTHER) if ours else (OTHER, LOG[2])
    store, intake = ReplicationStore(pool), CheckpointIntake(LogStore(pool))
    await store.insert_received([LOG[0], LOG[1], first, LOG[3]], "t")
    await intake.receive(checkpoint.signed, KEY.public_key, no_proof, PEER)
    [fork] = await store.resolve_forks([second])
    assert fork is not None and fork.new_evidence
    await intake.settle(PEER, 3)
    return intake


@pytest.mark.parametrize("order", [fork_then_checkpoint, checkpoint_then_fork])
async def test_a_checkpoint_over_the_dropped_version_is_fork_evidence(
    pool: asyncpg.Pool, order: object
) -> None:
    checkpoint = checkpoint_over(DROPPED)
    await order(pool, checkpoint)  # type: ignore[operator]
    logs = LogStore(pool)
    assert await logs.latest_checkpoint(PEER) is None  # never the log's root
    [(kept, reason)] = await logs.conflicts(PEER)
    assert kept == checkpoint
    leaf = envelope_leaf(DROPPED.raw).hex()
    assert reason == (
        f"fork evidence: the root at 4 covers version 0x{leaf} of sequence id 3,"
        " not the one the fork rule keeps"
    )


@pytest.mark.parametrize("order", [fork_then_checkpoint, checkpoint_then_fork])
async def test_a_checkpoint_over_the_kept_version_is_accepted(
    pool: asyncpg.Pool, order: object
) -> None:
    checkpoint = checkpoint_over(KEPT)
    await order(pool, checkpoint)  # type: ignore[operator]
    logs = LogStore(pool)
    assert await logs.latest_checkpoint(PEER) == checkpoint
    assert await logs.conflicts(PEER) == []


async def test_a_checkpoint_taken_before_its_leaves_is_judged_once_they_are_here(
    pool: asyncpg.Pool,
) -> None:
    """Accepted while only 1 and 2 were here; the fork and 4 come later: the next
    checkpoint taken in judges it like the others."""
    store, logs = ReplicationStore(pool), LogStore(pool)
    intake = CheckpointIntake(logs)
    await store.insert_received(LOG[:2], "t")
    early = checkpoint_over(DROPPED)
    assert await intake.receive(early.signed, KEY.public_key, no_proof, PEER) == early
    await store.insert_received([DROPPED], "t")
    await store.resolve_forks([KEPT])
    await intake.settle(PEER, 3)  # the tree stops at 3 still: nothing to judge yet
    assert await logs.latest_checkpoint(PEER) == early
    await store.insert_received([LOG[3]], "t")
    leaves = [envelope_leaf(e.raw) for e in (LOG[0], LOG[1], DROPPED, LOG[3])]
    later = sign_checkpoint(KEY, PEER, 5, merkle.root_of([*leaves, b"5" * 32]), 11, early)

    async def proof(first: int, second: int) -> list[bytes]:
        return []  # not consistent: kept aside too (the originator's log forked)

    assert await intake.receive(later.signed, KEY.public_key, proof, PEER) is None
    assert await logs.latest_checkpoint(PEER) is None
    [(first, why_first), (second, why_second)] = await logs.conflicts(PEER)
    assert (first, second) == (early, later)  # in the order stored
    assert why_first.startswith("fork evidence: the root at 4 covers")
    assert why_second == "the tree of 4 leaves is not a prefix of the one of 5"
