"""Reads a node's whole history for `xnode audit` (xnode.core.audit), streamed.

Everything is read in one read-only REPEATABLE READ transaction, so the tables agree with
each other (a leaf and its envelope, a conflict and the log's version) however long the audit
runs, and the long rows come through server-side cursors: memory stays bounded whatever the
size of the history."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import asyncpg

from xnode.core.audit import ConflictVersion

PREFETCH = 2000

_ORIGINATORS = """
SELECT originator_node_id FROM vector_clock
UNION SELECT originator_node_id FROM log_trees
UNION SELECT DISTINCT originator_node_id FROM log_checkpoints
ORDER BY 1
"""
# Every sequence id held, as envelope and / or leaf hash, in order: a merge of two primary keys.
_ROWS = """
SELECT coalesce(l.sequence_id, e.originator_sequence_id), l.leaf_hash, e.envelope, l.expiry
FROM (SELECT sequence_id, leaf_hash, expiry FROM log_leaves WHERE originator_node_id = $1) AS l
FULL JOIN (SELECT originator_sequence_id, envelope FROM originator_envelopes
           WHERE originator_node_id = $1) AS e
    ON l.sequence_id = e.originator_sequence_id
ORDER BY 1
"""
_CONFLICTS = """
SELECT f.originator_node_id, f.originator_sequence_id,
       array_agg(f.envelope_hash ORDER BY f.envelope_hash),
       array_agg(f.envelope ORDER BY f.envelope_hash),
       (SELECT envelope FROM originator_envelopes e
        WHERE e.originator_node_id = f.originator_node_id
          AND e.originator_sequence_id = f.originator_sequence_id)
FROM sequence_forks f
GROUP BY 1, 2 ORDER BY 1, 2
"""


@dataclass(frozen=True, slots=True)
class Conflict:
    originator_node_id: int
    sequence_id: int
    versions: list[ConflictVersion]
    log_raw: bytes | None


class AuditSource:
    """One snapshot of the node's tables; use inside `snapshot()`."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn

    @asynccontextmanager
    async def snapshot(self) -> AsyncIterator[AuditSource]:
        async with self._conn.transaction(isolation="repeatable_read", readonly=True):
            yield self

    async def row_count(self) -> int:
        """Envelopes plus leaves whose envelopes are gone: the progress bar's total (from
        the statistics' estimate would be wrong on a freshly loaded table, so counted)."""
        return int(
            await self._conn.fetchval(
                "SELECT (SELECT count(*) FROM originator_envelopes)"
                " + (SELECT count(*) FROM log_leaves l WHERE NOT EXISTS ("
                "SELECT 1 FROM originator_envelopes e WHERE e.originator_node_id ="
                " l.originator_node_id AND e.originator_sequence_id = l.sequence_id))"
            )
        )

    async def originators(self) -> list[int]:
        return [r[0] for r in await self._conn.fetch(_ORIGINATORS)]

    async def checkpoints(self, originator: int) -> list[bytes]:
        """The accepted checkpoints (one chain), smallest tree first."""
        rows = await self._conn.fetch(
            "SELECT signed FROM log_checkpoints WHERE originator_node_id = $1"
            " AND conflict IS NULL ORDER BY tree_size",
            originator,
        )
        return [bytes(r[0]) for r in rows]

    async def forked(self, originator: int) -> list[int]:
        rows = await self._conn.fetch(
            "SELECT DISTINCT originator_sequence_id FROM sequence_forks"
            " WHERE originator_node_id = $1",
            originator,
        )
        return [r[0] for r in rows]

    async def rows(
        self, originator: int
    ) -> AsyncIterator[tuple[int, bytes | None, bytes | None, int | None]]:
        """(sequence id, leaf hash or None, envelope or None, the leaf's committed expiry or
        None for format 1) in sequence order."""
        async for r in self._conn.cursor(_ROWS, originator, prefetch=PREFETCH):
            yield r[0], _bytes(r[1]), _bytes(r[2]), r[3]

    async def conflicts(self) -> AsyncIterator[Conflict]:
        async for r in self._conn.cursor(_CONFLICTS, prefetch=PREFETCH // 10):
            versions = [
                ConflictVersion(bytes(h), bytes(e)) for h, e in zip(r[2], r[3], strict=True)
            ]
            yield Conflict(r[0], r[1], versions, _bytes(r[4]))

    async def indexed_block(self) -> int | None:
        """The lowest block every payload contract is indexed to (None: never indexed)."""
        value = await self._conn.fetchval("SELECT min(block_number) FROM chain_progress")
        return None if value is None else int(value)

    async def chain_envelopes(
        self, keys: Sequence[tuple[int, int]]
    ) -> dict[tuple[int, int], bytes]:
        rows = await self._conn.fetch(
            "SELECT e.originator_node_id, e.originator_sequence_id, e.envelope"
            " FROM unnest($1::int[], $2::bigint[]) AS k(o, s)"
            " JOIN originator_envelopes e"
            " ON e.originator_node_id = k.o AND e.originator_sequence_id = k.s",
            [k[0] for k in keys],
            [k[1] for k in keys],
        )
        return {(r[0], r[1]): bytes(r[2]) for r in rows}

    async def chain_payloads_up_to(self, block: int) -> int:
        """Chain payloads stored from blocks up to `block`."""
        return int(
            await self._conn.fetchval(
                "SELECT count(*) FROM chain_payloads WHERE block_number <= $1", block
            )
        )


def _bytes(value: bytes | None) -> bytes | None:
    return None if value is None else bytes(value)
