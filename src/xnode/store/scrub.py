"""The scrub's reads and its one write (xnode.replication.scrub): every leaf held with its
envelope, if any, in (originator, sequence id) order a page at a time; and withdrawing an
envelope whose stored bytes its leaf does not commit to."""

from __future__ import annotations

import asyncpg

from xnode.core.leaves import HeldLeaf
from xnode.store.errors import driver_errors_translated

_PAGE = """
SELECT l.originator_node_id, l.sequence_id, l.leaf_hash, l.expiry, e.envelope
FROM log_leaves AS l
LEFT JOIN originator_envelopes AS e
    ON e.originator_node_id = l.originator_node_id AND e.originator_sequence_id = l.sequence_id
WHERE (l.originator_node_id, l.sequence_id) > ($1, $2)
ORDER BY l.originator_node_id, l.sequence_id LIMIT $3
"""
# One originator's leaves first..last with their envelopes, until the envelopes' bytes pass
# $4 (always the first leaf), and whether that left leaves out. octet_length reads a stored
# value's size without fetching it, so the envelopes cut off are never read.
_HELD_WITHIN = """
SELECT r.originator_node_id, r.sequence_id, r.leaf_hash, r.expiry, r.envelope,
       r.total > count(*) OVER () AS cut
FROM (
    SELECT l.originator_node_id, l.sequence_id, l.leaf_hash, l.expiry, e.envelope,
           count(*) OVER () AS total, row_number() OVER w AS n,
           sum(coalesce(octet_length(e.envelope), 0)) OVER w AS upto
    FROM log_leaves AS l
    LEFT JOIN originator_envelopes AS e
        ON e.originator_node_id = l.originator_node_id
        AND e.originator_sequence_id = l.sequence_id
    WHERE l.originator_node_id = $1 AND l.sequence_id BETWEEN $2 AND $3
    WINDOW w AS (ORDER BY l.sequence_id ROWS UNBOUNDED PRECEDING)
) AS r
WHERE r.n = 1 OR r.upto <= $4
ORDER BY r.sequence_id
"""
# Only the bytes judged, and only while the leaf is the one judged against: a fork that
# replaced both meanwhile is left alone.
_WITHDRAW = """
DELETE FROM originator_envelopes AS e USING log_leaves AS l
WHERE e.originator_node_id = $1 AND e.originator_sequence_id = $2 AND e.envelope = $3
    AND l.originator_node_id = $1 AND l.sequence_id = $2 AND l.leaf_hash = $4
"""


def _held(rows: list[asyncpg.Record]) -> list[HeldLeaf]:
    return [
        HeldLeaf(r[0], r[1], bytes(r[2]), r[3], None if r[4] is None else bytes(r[4])) for r in rows
    ]


@driver_errors_translated
class ScrubStore:
    def __init__(self, pool: asyncpg.Pool | asyncpg.Connection) -> None:
        self._pool = pool

    async def page(self, after: tuple[int, int], limit: int) -> list[HeldLeaf]:
        return _held(await self._pool.fetch(_PAGE, after[0], after[1], limit))

    async def held_within(
        self, originator: int, first: int, last: int, budget: int
    ) -> tuple[list[HeldLeaf], bool]:
        """`originator`'s leaves first..last with their envelopes, while the envelopes' bytes
        fit `budget` (always the first leaf); and whether that left leaves out."""
        rows = await self._pool.fetch(_HELD_WITHIN, originator, first, last, budget)
        return _held(rows), bool(rows and rows[0]["cut"])

    async def withdraw(self, row: HeldLeaf) -> bool:
        """Deletes the envelope `row` holds; False when it changed since it was read."""
        if row.raw is None:
            return False
        done = await self._pool.execute(
            _WITHDRAW, row.originator_node_id, row.sequence_id, row.raw, row.leaf
        )
        return bool(done.endswith(" 1"))
