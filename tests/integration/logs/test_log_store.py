"""The log store and checkpoint intake on a real Postgres: trees only over contiguous
prefixes (replicated logs arrive with gaps), checkpoints that contradict stored leaves kept
aside, forged ones refused, peers without LogApi left alone."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import grpc
import pytest
from structlog.testing import capture_logs

from xnode.client.node import group_message_envelope
from xnode.core import merkle
from xnode.core.backoff import Backoff
from xnode.core.checkpoints import Checkpoint, envelope_leaf, sign_checkpoint
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import (
    IndexedEnvelope,
    build_payer_envelope,
    originate,
    validate_payer_envelope,
)
from xnode.core.forks import newcomer_wins
from xnode.core.reconciliation import Fingerprint, SequenceRange
from xnode.observability.outage import DatabaseOutage
from xnode.replication.checkpoints import CheckpointFollower
from xnode.store.forks import resolve_fork
from xnode.store.logs import LogStore
from xnode.store.replication import ReplicationStore
from xnode.usecases.logs import CheckpointIntake, LogQueries

PEER = 200
KEY = SigningKey.generate()
PAYER = SigningKey.generate()


def signed(sequence_ids: list[int]) -> list[IndexedEnvelope]:
    out = []
    for s in sequence_ids:
        payer = build_payer_envelope(group_message_envelope(b"g" * 16, b"%d" % s), PAYER, PEER)
        out.append(originate(validate_payer_envelope(payer, PEER), PEER, s, 1000 + s, KEY))
    return out


@pytest.fixture
async def pool(database: str) -> AsyncIterator[asyncpg.Pool]:
    async with asyncpg.create_pool(database, min_size=1, max_size=4) as created:
        yield created


async def no_proof(first: int, second: int) -> list[bytes]:
    raise AssertionError("no consistency proof expected")


async def test_the_tree_covers_only_the_contiguous_prefix(pool: asyncpg.Pool) -> None:
    store, logs = ReplicationStore(pool), LogStore(pool)
    envelopes = signed(list(range(1, 8)))
    leaves = [envelope_leaf(e.raw) for e in envelopes]
    await store.insert_received([envelopes[i] for i in (0, 1, 3, 4, 6)], "t")
    assert await logs.tree_size(PEER) == 2  # 3 is missing: 4, 5 and 7 wait
    queries = LogQueries(logs, 0.05, 1.0)
    assert await queries.consistency(PEER, 1, 2) == [leaves[1]]
    with pytest.raises(LookupError):
        await queries.inclusion(PEER, 1, 4)
    await store.insert_received([envelopes[2]], "t")
    assert await logs.tree_size(PEER) == 5
    await store.insert_received([envelopes[5], envelopes[2]], "t")  # 3 again: idempotent
    assert await logs.tree_size(PEER) == 7
    hashes = await logs.perfect(PEER, merkle.perfect_nodes_for_root(7))
    root = merkle.range_hash(0, 7, lambda level, index: hashes[(level, index)])
    assert root == merkle.root_of(leaves)


async def test_intake_keeps_aside_what_contradicts_the_stored_leaves(pool: asyncpg.Pool) -> None:
    store, logs = ReplicationStore(pool), LogStore(pool)
    envelopes = signed(list(range(1, 5)))
    await store.insert_received(envelopes, "t")
    intake = CheckpointIntake(logs)
    leaves = [envelope_leaf(e.raw) for e in envelopes]

    good = sign_checkpoint(KEY, PEER, 4, merkle.root_of(leaves), 10, None)
    assert await intake.receive(good.signed, KEY.public_key, no_proof, PEER) == good
    assert await intake.receive(good.signed, KEY.public_key, no_proof, PEER) is None  # held
    assert await intake.after(PEER) == 4

    forged = sign_checkpoint(SigningKey.generate(), PEER, 4, bytes(32), 11, None)
    with capture_logs() as logged:
        assert await intake.receive(forged.signed, KEY.public_key, no_proof, PEER) is None
    assert [e["event"] for e in logged] == ["checkpoint_rejected"]
    assert await logs.conflicts(PEER) == []  # not the originator's: no evidence of anything

    # Signed by the originator, but over other content for sequence id 3: a fork.
    forked = [*leaves[:2], merkle.leaf_hash(b"other"), leaves[3]]
    fork = sign_checkpoint(KEY, PEER, 4, merkle.root_of(forked), 12, None)
    with capture_logs() as logged:
        assert await intake.receive(fork.signed, KEY.public_key, no_proof, PEER) is None
    assert [e["event"] for e in logged] == ["checkpoint_conflict"]
    assert logged[0]["stored"] == "0x" + good.signed.hex()
    [(kept, reason)] = await logs.conflicts(PEER)
    assert kept == fork and reason
    assert await logs.latest_checkpoint(PEER) == good  # the accepted chain is unchanged


async def test_intake_checks_consistency_with_the_last_stored_checkpoint(
    pool: asyncpg.Pool,
) -> None:
    logs = LogStore(pool)
    intake = CheckpointIntake(logs)
    leaves = [merkle.leaf_hash(bytes([i])) for i in range(9)]
    first = sign_checkpoint(KEY, PEER, 4, merkle.root_of(leaves[:4]), 10, None)
    assert await intake.receive(first.signed, KEY.public_key, no_proof, PEER) == first

    def perfect(level: int, index: int) -> bytes:
        return merkle.root_of(leaves[index << level : (index + 1) << level])

    async def proof(a: int, b: int) -> list[bytes]:
        return merkle.consistency_proof(a, b, perfect)

    forked = [*leaves]
    forked[1] = merkle.leaf_hash(b"rewritten")
    bad: Checkpoint = sign_checkpoint(KEY, PEER, 9, merkle.root_of(forked), 11, first)
    assert await intake.receive(bad.signed, KEY.public_key, proof, PEER) is None
    assert len(await logs.conflicts(PEER)) == 1
    good = sign_checkpoint(KEY, PEER, 9, merkle.root_of(leaves), 12, first)
    assert await intake.receive(good.signed, KEY.public_key, proof, PEER) == good


async def test_a_peer_without_log_api_is_left_alone(pool: asyncpg.Pool) -> None:
    server = grpc.aio.server()
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    follower = CheckpointFollower(
        CheckpointIntake(LogStore(pool)),
        lambda: {PEER: KEY.public_key},
        lambda: Backoff(0.1, 1),
        DatabaseOutage(str),
    )
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            with capture_logs() as logged:
                await follower.run(lambda: channel, PEER, PEER)  # returns instead of retrying
    finally:
        await server.stop(None)
    assert [e["event"] for e in logged] == ["peer_without_log_api"]


async def test_subtrees_past_a_gap_are_kept_and_filling_it_joins_them(pool: asyncpg.Pool) -> None:
    """Leaves past a gap keep their complete subtrees (tiles of 16 and above), so filling
    the gap joins stored subtrees: the tree then covers everything with the reference root."""
    store, logs = ReplicationStore(pool), LogStore(pool)
    n, gap = 200, [20, 21, 70]
    envelopes = signed(list(range(1, n + 1)))
    leaves = [envelope_leaf(e.raw) for e in envelopes]
    held = [e for e in envelopes if e.sequence_id not in gap]
    for i in range(0, len(held), 37):
        await store.insert_received(held[i : i + 37], "t")
    assert await logs.tree_size(PEER) == 19
    nodes = await pool.fetch("SELECT level, node_index, hash FROM log_nodes")
    stored = {(r[0], r[1]): bytes(r[2]) for r in nodes}
    # Tile 5 (leaves 81..96) lies past both gaps and is complete; so is level 5's node 3
    # (leaves 97..128), made of tiles 6 and 7.
    assert stored[(4, 5)] == merkle.root_of(leaves[80:96])
    assert stored[(5, 3)] == merkle.root_of(leaves[96:128])
    assert (4, 1) not in stored and (4, 4) not in stored  # they hold the gaps
    await store.insert_received([envelopes[19], envelopes[20]], "t")
    assert await logs.tree_size(PEER) == 69
    await store.insert_received([envelopes[69]], "t")
    assert await logs.tree_size(PEER) == n
    hashes = await logs.perfect(PEER, merkle.perfect_nodes_for_root(n))
    assert merkle.range_hash(0, n, lambda lv, i: hashes[(lv, i)]) == merkle.root_of(leaves)


async def test_range_fingerprints_from_tiles_equal_those_of_the_leaves(pool: asyncpg.Pool) -> None:
    """Fingerprints read from tiles (fingerprinted on insert, or later for tiles stored
    without one) equal the leaves' own, for ranges with gaps, edges and the open tail."""
    store, logs = ReplicationStore(pool), LogStore(pool)
    n = 150
    envelopes = signed(list(range(1, n + 1)))
    leaves = {e.sequence_id: envelope_leaf(e.raw) for e in envelopes}
    held = [e for e in envelopes if e.sequence_id not in (5, 40, 41, 99)]
    await store.insert_received(held, "t")
    # As the sequencer stores them: a tile without its fingerprint.
    await pool.execute("UPDATE log_nodes SET fingerprint = NULL WHERE level = 4 AND node_index = 7")
    held_ids = {e.sequence_id for e in held}
    ranges = [
        SequenceRange(1, n),
        SequenceRange(3, 17),
        SequenceRange(17, 32),
        SequenceRange(16, 97),
        SequenceRange(33, 48),
        SequenceRange(100, 2**63 - 1),
        SequenceRange(151, 2**63 - 1),
        SequenceRange(2, 2),
    ]
    found = await logs.fingerprints(PEER, ranges)
    expected = [
        Fingerprint.of(leaves[s] for s in range(r.first, min(r.last, n) + 1) if s in held_ids)
        for r in ranges
    ]
    assert found == expected
    assert not await pool.fetchval(
        "SELECT count(*) FROM log_nodes WHERE level = 4 AND fingerprint IS NULL"
    )


async def test_absent_names_exactly_the_ids_not_held(pool: asyncpg.Pool) -> None:
    """The ids a repair names to its peer (anti_entropy NAME_MAX): read through the tiles
    where they are complete, leaf by leaf where one is missing or was never stored."""
    store, logs = ReplicationStore(pool), LogStore(pool)
    n = 200
    lost = {5, 40, 41, 99, 160, 161, 162, 163}
    await store.insert_received(
        [e for e in signed(list(range(1, n + 1))) if e.sequence_id not in lost], "t"
    )
    ranges = [SequenceRange(1, 16), SequenceRange(17, 100), SequenceRange(150, 230)]
    expected = sorted(s for r in ranges for s in range(r.first, r.last + 1) if s in lost or s > n)
    assert await logs.absent(PEER, ranges) == expected
    # Complete tiles without a stored subtree (leaves from before subtrees were kept past
    # gaps) are read leaf by leaf: the answer is the same.
    await pool.execute("DELETE FROM log_nodes WHERE level = 4 AND node_index IN (3, 4, 11)")
    assert await logs.absent(PEER, ranges) == expected
    assert await logs.absent(PEER, [SequenceRange(100, 104)]) == []


async def test_a_fork_low_in_the_log_recomputes_its_path_to_the_top(pool: asyncpg.Pool) -> None:
    """A fork rewriting leaf 7 of 40 drops and recomputes the subtrees over it, up to the
    log's highest level (not only as high as leaf 7's own id reaches)."""
    store, logs = ReplicationStore(pool), LogStore(pool)
    envelopes = signed(list(range(1, 41)))
    await store.insert_received(envelopes, "t")
    for attempt in range(64):  # a version the rule puts in the log in place of the stored one
        data = b"other %d" % attempt
        payer = build_payer_envelope(group_message_envelope(b"g" * 16, data), PAYER, PEER)
        other = originate(validate_payer_envelope(payer, PEER), PEER, 7, 1007, KEY)
        if newcomer_wins(envelopes[6].raw, other.raw):
            break
    async with pool.acquire() as conn, conn.transaction():
        assert await resolve_fork(conn, other) is not None
    rows = await pool.fetch("SELECT sequence_id, leaf_hash FROM log_leaves ORDER BY 1")
    leaves = [bytes(r[1]) for r in rows]
    assert leaves[6] == envelope_leaf(other.raw)
    assert await logs.tree_size(PEER) == 40
    hashes = await logs.perfect(PEER, merkle.perfect_nodes_for_root(40))
    assert merkle.range_hash(0, 40, lambda lv, i: hashes[(lv, i)]) == merkle.root_of(leaves)
