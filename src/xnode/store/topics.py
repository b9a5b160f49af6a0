"""Per-topic commitments in Postgres (docs/proofs.md, "Completeness proofs"; migration 0011).

`advance_topics` brings an originator's topic map up to a tree size from the envelopes held
(in the caller's transaction: the issuer's, so the checkpoint it signs commits to the map of
exactly its tree; the intake's for replicas). The map's inner nodes down to the bucket depth
are rows of `topic_map_nodes`; empty and one-topic subtrees are read from `topic_heads` by
key range, and buckets are hashed from their heads (xnode.core.topic_map)."""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg
import structlog

from xnode.core import merkle, topic_map
from xnode.core.checkpoints import Checkpoint, TopicCommitment, parse_checkpoint
from xnode.core.completeness import entry_of
from xnode.core.topic_map import (
    BUCKET_DEPTH,
    EMPTY,
    EMPTY_NODE,
    MapNode,
    NodeIndex,
    TopicEntry,
    bucket_of,
    head_value,
    leaf_node,
    node_range,
    topic_key,
)
from xnode.store.connection import PgConnection
from xnode.store.errors import driver_errors_translated
from xnode.usecases.completeness import TopicMaterial

log = structlog.get_logger(__name__)

_INNER = """
SELECT n.depth, n.idx, t.hash FROM unnest($2::smallint[], $3::bigint[]) AS n(depth, idx)
JOIN topic_map_nodes AS t
    ON t.originator_node_id = $1 AND t.depth = n.depth AND t.node_index = n.idx
"""
# Up to two topics per key range: none (empty), one (that topic's leaf) or more.
_IN_RANGES = """
SELECT r.i, h.topic_key, h.size, h.root
FROM unnest($2::bytea[], $3::bytea[]) WITH ORDINALITY AS r(low, high, i)
CROSS JOIN LATERAL (
    SELECT topic_key, size, root FROM topic_heads
    WHERE originator_node_id = $1 AND topic_key BETWEEN r.low AND r.high
    ORDER BY topic_key LIMIT $4
) AS h
ORDER BY r.i, h.topic_key
"""
_ENVELOPES = """
SELECT originator_sequence_id, topic, envelope FROM originator_envelopes
WHERE originator_node_id = $1 AND originator_sequence_id > $2 AND originator_sequence_id <= $3
ORDER BY originator_sequence_id
"""
_HEADS = """
SELECT topic_key, size, peaks FROM topic_heads
WHERE originator_node_id = $1 AND topic_key = ANY($2::bytea[])
"""
_UPSERT_HEADS = """
INSERT INTO topic_heads
SELECT $1, * FROM unnest($2::bytea[], $3::bigint[], $4::bytea[], $5::bytea[])
ON CONFLICT (originator_node_id, topic_key)
DO UPDATE SET size = excluded.size, root = excluded.root, peaks = excluded.peaks
"""
_INSERT_ENTRIES = """
INSERT INTO topic_entries SELECT $1, * FROM unnest(
    $2::bytea[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bytea[])
"""
_UPSERT_INNER = """
INSERT INTO topic_map_nodes SELECT $1, * FROM unnest($2::smallint[], $3::bigint[], $4::bytea[])
ON CONFLICT (originator_node_id, depth, node_index) DO UPDATE SET hash = excluded.hash
"""
_ENTRIES = """
SELECT sequence_id, expiry, content_hash FROM topic_entries
WHERE originator_node_id = $1 AND topic_key = $2 ORDER BY position
"""
_HELD = """
SELECT originator_sequence_id, envelope FROM originator_envelopes
WHERE originator_node_id = $1 AND originator_sequence_id = ANY($2::bigint[])
"""


def _columns(rows: Sequence[tuple[object, ...]]) -> list[list[object]]:
    """Rows as the columns unnest() takes."""
    return [list(column) for column in zip(*rows, strict=True)]


def _peaks(raw: bytes) -> list[bytes]:
    return [raw[i : i + merkle.HASH_LENGTH] for i in range(0, len(raw), merkle.HASH_LENGTH)]


async def _in_ranges(
    conn: PgConnection, originator: int, ranges: Sequence[tuple[bytes, bytes]], limit: int
) -> list[list[topic_map.Leaf]]:
    """The map's leaves (key, value) in each key range, at most `limit` per range."""
    found: list[list[topic_map.Leaf]] = [[] for _ in ranges]
    if not ranges:
        return found
    rows = await conn.fetch(
        _IN_RANGES, originator, [r[0] for r in ranges], [r[1] for r in ranges], limit
    )
    for r in rows:
        found[r[0] - 1].append((bytes(r[1]), head_value(r[2], bytes(r[3]))))
    return found


async def map_nodes(
    conn: PgConnection, originator: int, nodes: Sequence[NodeIndex]
) -> dict[NodeIndex, MapNode]:
    """The map's nodes at these (depth, index), depth <= BUCKET_DEPTH: stored inner nodes,
    else the subtree's one leaf, else empty. Two queries."""
    rows = await conn.fetch(_INNER, originator, [n[0] for n in nodes], [n[1] for n in nodes])
    found = {(r[0], r[1]): MapNode(bytes(r[2]), 2) for r in rows}
    rest = [n for n in nodes if n not in found]
    for n, leaves in zip(
        rest, await _in_ranges(conn, originator, [node_range(*n) for n in rest], 2), strict=True
    ):
        if len(leaves) > 1:
            raise merkle.ProofError(f"topic map of {originator} lacks inner node {n}")
        found[n] = leaf_node(*leaves[0]) if leaves else EMPTY_NODE
    return found


async def _bucket_nodes(
    conn: PgConnection, originator: int, buckets: Sequence[int]
) -> dict[int, MapNode]:
    ranges = [node_range(BUCKET_DEPTH, b) for b in buckets]
    leaves = await _in_ranges(conn, originator, ranges, 2**31 - 1)
    return {
        b: topic_map.subtree(held, BUCKET_DEPTH) for b, held in zip(buckets, leaves, strict=True)
    }


async def _applied(conn: PgConnection, originator: int, size: int) -> tuple[int, int, bytes]:
    """(tree size applied, first sequence id covered, root), the row locked; a map starts
    from the log's beginning when every envelope of it is still held, else after `size`."""
    row = await conn.fetchrow(
        "SELECT tree_size, first_sequence_id, root FROM topic_maps"
        " WHERE originator_node_id = $1 FOR UPDATE",
        originator,
    )
    if row is not None:
        return row[0], row[1], bytes(row[2])
    held = await conn.fetchval(
        "SELECT count(*) FROM originator_envelopes"
        " WHERE originator_node_id = $1 AND originator_sequence_id <= $2",
        originator,
        size,
    )
    applied = 0 if held == size else size
    await conn.execute(
        "INSERT INTO topic_maps VALUES ($1, $2, $3, $4)", originator, applied, applied + 1, EMPTY
    )
    return applied, applied + 1, EMPTY


async def advance_topics(conn: PgConnection, originator: int, size: int) -> TopicCommitment | None:
    """The originator's topic map brought up to tree size `size` (the caller's transaction),
    or None when it cannot be: an envelope of the range is not held (lost, being repaired),
    or the map is already past `size`."""
    applied, first, root = await _applied(conn, originator, size)
    if applied > size:
        return None
    if applied < size:
        rows = await conn.fetch(_ENVELOPES, originator, applied, size)
        if len(rows) != size - applied:
            log.warning(
                "topic_map_waits",
                originator=originator,
                applied=applied,
                tree_size=size,
                held=len(rows),
            )
            return None
        root = await append_envelopes(
            conn, originator, [(r[0], bytes(r[1]), bytes(r[2])) for r in rows]
        )
        await conn.execute(
            "UPDATE topic_maps SET tree_size = $2, root = $3 WHERE originator_node_id = $1",
            originator,
            size,
            root,
        )
    return TopicCommitment(root, first)


async def append_envelopes(
    conn: PgConnection, originator: int, envelopes: Sequence[tuple[int, bytes, bytes]]
) -> bytes:
    """Appends (sequence id, topic, envelope), in sequence order, to their topics' logs and
    re-hashes the map over the topics touched; returns the map's root. `advance_topics`
    keeps `topic_maps` in step; alone it is for benchmarks."""
    by_topic: dict[bytes, list[TopicEntry]] = {}
    for sequence_id, topic, raw in envelopes:
        by_topic.setdefault(topic_key(topic), []).append(entry_of(raw, sequence_id))
    keys = sorted(by_topic)
    heads = {bytes(r[0]): (r[1], bytes(r[2])) for r in await conn.fetch(_HEADS, originator, keys)}
    entry_rows: list[tuple[bytes, int, int, int, bytes]] = []
    head_rows: list[tuple[bytes, int, bytes, bytes]] = []
    for key in keys:
        size, peaks = heads.get(key, (0, b""))
        frontier = merkle.Frontier(size, _peaks(peaks))
        for e in by_topic[key]:
            entry_rows.append((key, frontier.size, e.sequence_id, e.expiry, e.content_hash))
            frontier.append(e.hash)
        head_rows.append((key, frontier.size, frontier.root(), b"".join(frontier.peaks)))
    await conn.execute(_INSERT_ENTRIES, originator, *_columns(entry_rows))
    await conn.execute(_UPSERT_HEADS, originator, *_columns(head_rows))
    buckets = sorted({bucket_of(k) for k in keys})
    changed = await _bucket_nodes(conn, originator, buckets)
    siblings = await map_nodes(conn, originator, topic_map.siblings_for_update(buckets))
    made = topic_map.updated_top(changed, lambda depth, index: siblings[(depth, index)])
    # Topics never leave the map, so an inner node stays one: nothing is ever deleted.
    inner = [(n, node.hash) for n, node in made.items() if node.leaves > 1]
    await conn.execute(
        _UPSERT_INNER,
        originator,
        [n[0] for n, _ in inner],
        [n[1] for n, _ in inner],
        [h for _, h in inner],
    )
    return made[(0, 0)].hash


@driver_errors_translated
class TopicStore:
    """The topic maps of every originator this node holds (usecases.completeness)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def material(
        self, originator: int, topics: Sequence[tuple[bytes, int]], limit: int
    ) -> tuple[Checkpoint, list[TopicMaterial]] | None:
        """Against the accepted checkpoint at the size the map was computed to, read in one
        snapshot; None when there is none (no map yet, or a checkpoint without topics)."""
        async with (
            self.pool.acquire() as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            row = await conn.fetchrow(
                "SELECT c.signed, m.root FROM topic_maps AS m JOIN log_checkpoints AS c"
                " ON c.originator_node_id = m.originator_node_id AND c.tree_size = m.tree_size"
                " AND c.conflict IS NULL WHERE m.originator_node_id = $1",
                originator,
            )
            if row is None:
                return None
            checkpoint = parse_checkpoint(bytes(row[0]))[0]
            if checkpoint.topics is None or checkpoint.topics.map_root != bytes(row[1]):
                return None
            return checkpoint, [
                await self._one(conn, originator, topic, after, limit) for topic, after in topics
            ]

    async def _one(
        self, conn: PgConnection, originator: int, topic: bytes, after: int, limit: int
    ) -> TopicMaterial:
        key = topic_key(topic)
        top = await map_nodes(conn, originator, topic_map.top_nodes_for_proof(key))
        (bucket,) = await _in_ranges(
            conn, originator, [node_range(BUCKET_DEPTH, bucket_of(key))], 2**31 - 1
        )
        proof = topic_map.prove_key(key, lambda depth, index: top[(depth, index)], bucket)
        rows = await conn.fetch(_ENTRIES, originator, key)
        entries = [TopicEntry(r[0], r[1], bytes(r[2])) for r in rows]
        wanted = [e.sequence_id for e in entries if e.sequence_id > after][:limit]
        held = {r[0]: bytes(r[1]) for r in await conn.fetch(_HELD, originator, wanted)}
        return TopicMaterial(topic, after, proof, entries, held)
