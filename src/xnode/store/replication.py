"""What the replication worker stores and reads (the port replication.ports.ReplicaStore):
envelopes received from peers, the newest stored envelope per originator, and stored bytes by
sequence id for duplicate checks."""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from xnode.core.envelopes import IndexedEnvelope
from xnode.core.forks import ForkResolution
from xnode.core.verification import Position
from xnode.store.errors import driver_errors_translated
from xnode.store.forks import resolve_fork
from xnode.store.logs import extend_trees, leaf_columns
from xnode.store.notifications import NOTIFY_CHANNEL, commit_notice
from xnode.store.partitions import by_key

# The newest stored envelope of every originator: where each peer stream resumes, and what
# the next envelope must follow.
_NEWEST_PER_ORIGINATOR = """
SELECT e.originator_node_id, e.originator_sequence_id, e.originator_ns, e.envelope
FROM vector_clock AS v
JOIN originator_envelopes AS e
    ON e.originator_node_id = v.originator_node_id
   AND e.originator_sequence_id = v.sequence_id
"""

_STORED = by_key(
    "originator_sequence_id, envelope",
    "originator_node_id = $1 AND originator_sequence_id = ANY($2::bigint[])",
)

_INSERT_RECEIVED = """
WITH rows AS (
    SELECT * FROM unnest($1::int[], $2::bigint[], $3::bigint[], $4::bytea[], $5::bigint[],
                         $6::bytea[], $7::bytea[], $12::bigint[], $13::bigint[])
        AS r(originator_node_id, originator_sequence_id, originator_ns, topic,
             expiry_unixtime, payer_address, envelope, base_fee_picodollars,
             congestion_fee_picodollars)
), inserted AS (
    INSERT INTO originator_envelopes
    SELECT * FROM rows
    -- a sequence id already stored is skipped (migration 0009's envelope_keys trigger)
    RETURNING originator_node_id, originator_sequence_id
), leaves AS (
    INSERT INTO log_leaves
    SELECT l.* FROM unnest($8::int[], $9::bigint[], $10::bytea[], $11::bigint[], $14::bigint[],
                           $15::bytea[])
        AS l(originator_node_id, sequence_id, leaf_hash, fingerprint, expiry, content_hash)
    JOIN inserted AS i ON i.originator_node_id = l.originator_node_id
        AND i.originator_sequence_id = l.sequence_id
    ON CONFLICT DO NOTHING
), clock AS (
    INSERT INTO vector_clock (originator_node_id, sequence_id)
    SELECT originator_node_id, max(originator_sequence_id) FROM inserted GROUP BY 1
    ON CONFLICT (originator_node_id)
    DO UPDATE SET sequence_id = GREATEST(vector_clock.sequence_id, excluded.sequence_id)
)
SELECT originator_node_id, array_agg(originator_sequence_id) FROM inserted GROUP BY 1
"""


@driver_errors_translated
class ReplicationStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def newest_per_originator(self) -> dict[int, Position]:
        rows = await self._pool.fetch(_NEWEST_PER_ORIGINATOR)
        return {r[0]: Position(r[1], r[2], bytes(r[3])) for r in rows}

    async def stored_envelopes(
        self, originator: int, sequence_ids: Sequence[int]
    ) -> dict[int, bytes]:
        """The stored bytes at these sequence ids (expired or not), to compare with
        duplicates."""
        rows = await self._pool.fetch(
            _STORED,
            originator,
            list(sequence_ids),
        )
        return {r[0]: bytes(r[1]) for r in rows}

    async def insert_received(
        self, envelopes: Sequence[IndexedEnvelope], notice_token: str
    ) -> list[tuple[int, int]]:
        """Idempotent insert of envelopes from other originators; returns the new keys. Their
        log leaves go in with them, and their logs' trees grow (xnode.store.logs)."""
        columns = [
            [e.originator_node_id for e in envelopes],
            [e.sequence_id for e in envelopes],
            [e.originator_ns for e in envelopes],
            [e.topic for e in envelopes],
            [e.expiry or None for e in envelopes],  # 0 = never = NULL
            [e.payer_address for e in envelopes],
            [e.raw for e in envelopes],
        ]
        fees = [[e.base_fee for e in envelopes], [e.congestion_fee for e in envelopes]]
        *leaves, expiries, content_hashes = leaf_columns(envelopes)
        async with self._pool.acquire() as conn, conn.transaction():
            rows = await conn.fetch(
                _INSERT_RECEIVED,
                *columns,
                *leaves,
                *fees,
                expiries,
                content_hashes,  # $1-7, $8-11, $12-13, $14, $15
            )
            # One row per originator with its keys in an array: a catch-up's thousands of
            # keys are decoded without a record each.
            added: dict[int, list[int]] = {r[0]: r[1] for r in rows}
            inserted = [(o, s) for o, keys in added.items() for s in keys]
            if inserted:
                await extend_trees(conn, list(added), inserted)
                await conn.execute(
                    "SELECT pg_notify($1, $2)",
                    NOTIFY_CHANNEL,
                    commit_notice(notice_token, [(o, max(keys)) for o, keys in added.items()]),
                )
        return inserted

    async def resolve_forks(
        self, envelopes: Sequence[IndexedEnvelope]
    ) -> list[ForkResolution | None]:
        """Each envelope against the log's version of its sequence id (xnode.store.forks),
        in one transaction. Nothing is notified: see OriginatorLog._insert."""
        async with self._pool.acquire() as conn, conn.transaction():
            return [await resolve_fork(conn, e) for e in envelopes]
