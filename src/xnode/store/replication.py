"""Queries the replication worker needs beyond EnvelopeStore's."""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from xnode.core.verification import Position

# The newest stored envelope of every originator: where each peer stream resumes, and what
# the next envelope must follow.
_NEWEST_PER_ORIGINATOR = """
SELECT e.originator_node_id, e.originator_sequence_id, e.originator_ns, e.envelope
FROM vector_clock AS v
JOIN originator_envelopes AS e
    ON e.originator_node_id = v.originator_node_id
   AND e.originator_sequence_id = v.sequence_id
"""


async def newest_per_originator(pool: asyncpg.Pool) -> dict[int, Position]:
    rows = await pool.fetch(_NEWEST_PER_ORIGINATOR)
    return {r[0]: Position(r[1], r[2], bytes(r[3])) for r in rows}


async def stored_envelopes(
    pool: asyncpg.Pool, originator: int, sequence_ids: Sequence[int]
) -> dict[int, bytes]:
    """The stored bytes at these sequence ids (expired or not), to compare with duplicates."""
    rows = await pool.fetch(
        "SELECT originator_sequence_id, envelope FROM originator_envelopes"
        " WHERE originator_node_id = $1 AND originator_sequence_id = ANY($2::bigint[])",
        originator,
        list(sequence_ids),
    )
    return {r[0]: bytes(r[1]) for r in rows}
