"""Forked sequence ids (migration 0005): the deterministic rule applied to the log in one
transaction, and every signed version kept as evidence.

When the newcomer takes the stored version's place, the committed log follows: its leaf is
rewritten and the tree is rebuilt from that sequence id (the perfect subtrees covering it
are dropped and `extend_trees` recomputes them and grows the prefix again), so every node
ends with the same leaves and roots whatever order it saw the versions in."""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from xnode.core.checkpoints import envelope_leaf, has_log
from xnode.core.envelopes import IndexedEnvelope
from xnode.core.forks import (
    Fork,
    ForkDigest,
    ForkResolution,
    envelope_hash,
    fork_digest,
    newcomer_wins,
)
from xnode.core.leaves import content_hash_of
from xnode.core.reconciliation import fingerprint_part
from xnode.store.connection import PgConnection
from xnode.store.errors import driver_errors_translated
from xnode.store.logs import extend_trees

MAX_QUERY_FORKS = 1000

_KEEP = """
INSERT INTO sequence_forks VALUES ($1, $2, $3, $4), ($1, $2, $5, $6)
ON CONFLICT DO NOTHING
RETURNING envelope_hash
"""

_REPLACE = """
UPDATE originator_envelopes
SET originator_ns = $3, topic = $4, expiry_unixtime = $5, payer_address = $6, envelope = $7
WHERE originator_node_id = $1 AND originator_sequence_id = $2
"""

# Leaf index = sequence id - 1; a perfect subtree (level, node_index) covers leaf indices
# [node_index << level, (node_index + 1) << level).
_REPLACE_LEAF = """
WITH leaf AS (
    UPDATE log_leaves SET leaf_hash = $3, fingerprint = $4, expiry = $5, content_hash = $6
    WHERE originator_node_id = $1 AND sequence_id = $2
), nodes AS (
    DELETE FROM log_nodes
    WHERE originator_node_id = $1 AND (node_index << level) <= $2 - 1
        AND ((node_index + 1) << level) > $2 - 1
)
UPDATE log_trees SET tree_size = least(tree_size, $2 - 1) WHERE originator_node_id = $1
"""


async def _replace_leaf(conn: PgConnection, envelope: IndexedEnvelope) -> None:
    if not has_log(envelope.originator_node_id):
        return
    leaf = envelope.leaf or envelope_leaf(envelope.raw)
    await conn.execute(
        _REPLACE_LEAF,
        envelope.originator_node_id,
        envelope.sequence_id,
        leaf,
        fingerprint_part(leaf),
        envelope.expiry,  # the leaf's committed expiry (format 2)
        content_hash_of(envelope.raw),  # and its opening
    )
    await extend_trees(
        conn, [envelope.originator_node_id], [(envelope.originator_node_id, envelope.sequence_id)]
    )


async def resolve_fork(conn: PgConnection, newcomer: IndexedEnvelope) -> ForkResolution | None:
    """Within the caller's transaction: keeps both versions as evidence and puts the one
    xnode.core.forks picks in the log. None when the log holds nothing there or the same
    bytes. The row is locked first, so concurrent streams agree on what was there."""
    key = (newcomer.originator_node_id, newcomer.sequence_id)
    stored = await conn.fetchval(
        "SELECT envelope FROM originator_envelopes"
        " WHERE originator_node_id = $1 AND originator_sequence_id = $2 FOR UPDATE",
        *key,
    )
    if stored is None or bytes(stored) == newcomer.raw:
        return None
    previous = bytes(stored)
    kept = await conn.fetch(
        _KEEP, *key, envelope_hash(previous), previous, envelope_hash(newcomer.raw), newcomer.raw
    )
    replaced = newcomer_wins(previous, newcomer.raw)
    if replaced:
        await conn.execute(
            _REPLACE,
            *key,
            newcomer.originator_ns,
            newcomer.topic,
            newcomer.expiry or None,  # 0 = never = NULL
            newcomer.payer_address,
            newcomer.raw,
        )
        await _replace_leaf(conn, newcomer)
    return ForkResolution(previous, replaced, bool(kept))


@driver_errors_translated
class ForkStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def forks(
        self, originator: int, after_sequence_id: int, limit: int = MAX_QUERY_FORKS
    ) -> list[Fork]:
        """Forked sequence ids of `originator` above `after_sequence_id`, in order, each
        with its versions lowest hash (the log's) first."""
        rows = await self._pool.fetch(
            "SELECT originator_sequence_id, array_agg(envelope ORDER BY envelope_hash)"
            " FROM sequence_forks"
            " WHERE originator_node_id = $1 AND originator_sequence_id > $2"
            " GROUP BY 1 ORDER BY 1 LIMIT $3",
            originator,
            after_sequence_id,
            limit,
        )
        return [Fork(originator, r[0], tuple(bytes(v) for v in r[1])) for r in rows]

    async def digest(self, originator: int) -> ForkDigest:
        """The digest of every version of `originator`'s forks kept here (forks are rare:
        the hashes are read whole)."""
        rows = await self._pool.fetch(
            "SELECT originator_sequence_id, envelope_hash FROM sequence_forks"
            " WHERE originator_node_id = $1",
            originator,
        )
        return fork_digest((r[0], bytes(r[1])) for r in rows)

    async def kept_versions(
        self, originator: int, sequence_ids: Sequence[int]
    ) -> dict[int, set[bytes]]:
        """The `envelope_hash` of each version kept as evidence, per sequence id asked."""
        rows = await self._pool.fetch(
            "SELECT originator_sequence_id, envelope_hash FROM sequence_forks"
            " WHERE originator_node_id = $1 AND originator_sequence_id = any($2::bigint[])",
            originator,
            list(sequence_ids),
        )
        found: dict[int, set[bytes]] = {}
        for r in rows:
            found.setdefault(r[0], set()).add(bytes(r[1]))
        return found
