"""The originator's sequencer: gap-free sequence ids, assigned and stored in one transaction.

The row of this node's id in `vector_clock` is locked FOR UPDATE, so originating is serialized
across every process sharing the database; a rolled-back batch leaves no gap because the id
counter is that row, not a Postgres sequence.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import asyncpg

from xnode.crypto import SigningKey
from xnode.envelopes import OriginatedEnvelope, ValidPayerEnvelope, originate
from xnode.store.envelopes import NOTIFY_CHANNEL

# The row exists from start-up (NodeIdentityStore.claim); locking it serializes originating.
_LOCK_CLOCK = """
SELECT sequence_id, last_ns FROM vector_clock WHERE originator_node_id = $1 FOR UPDATE
"""

_APPEND = """
WITH inserted AS (
    INSERT INTO originator_envelopes
    SELECT * FROM unnest($1::int[], $2::bigint[], $3::bigint[], $4::bytea[], $5::bigint[],
                         $6::bytea[], $7::bytea[])
), clock AS (
    UPDATE vector_clock SET sequence_id = $8, last_ns = $9 WHERE originator_node_id = $10
)
SELECT pg_notify($11, $12)
"""


def _timestamps(count: int, last_ns: int, now_ns: int) -> list[int]:
    """Strictly increasing originator timestamps, even if the wall clock steps back."""
    first = max(now_ns, last_ns + 1)
    return [first + i for i in range(count)]


# Batches this large are signed in a worker thread: libsecp256k1 releases the GIL, so the
# event loop keeps validating and answering meanwhile.
THREAD_SIGNING_MIN = 32


async def _sign(
    batch: Sequence[ValidPayerEnvelope],
    node_id: int,
    first_seq: int,
    stamps: list[int],
    key: SigningKey,
) -> list[OriginatedEnvelope]:
    def sign_all() -> list[OriginatedEnvelope]:
        return [
            originate(payer, node_id, first_seq + i, stamps[i], key)
            for i, payer in enumerate(batch)
        ]

    if len(batch) >= THREAD_SIGNING_MIN:
        return await asyncio.to_thread(sign_all)
    return sign_all()


async def append_originated(
    conn: asyncpg.Connection,
    node_id: int,
    key: SigningKey,
    batch: Sequence[ValidPayerEnvelope],
    now_ns: int,
    notice_token: str,
) -> list[OriginatedEnvelope]:
    """Assigns ids and timestamps, signs and inserts `batch`; the caller owns the transaction."""
    row = await conn.fetchrow(_LOCK_CLOCK, node_id)
    if row is None:
        raise RuntimeError(f"vector clock row for node {node_id} is missing")
    first_seq = row[0] + 1
    stamps = _timestamps(len(batch), row[1], now_ns)
    signed = await _sign(batch, node_id, first_seq, stamps, key)
    last = signed[-1]
    await conn.execute(
        _APPEND,
        [e.originator_node_id for e in signed],
        [e.sequence_id for e in signed],
        [e.originator_ns for e in signed],
        [e.topic for e in signed],
        [e.expiry or None for e in signed],
        [e.payer_address for e in signed],
        [e.raw for e in signed],
        last.sequence_id,
        last.originator_ns,
        node_id,
        NOTIFY_CHANNEL,
        f"{notice_token}|{node_id}:{last.sequence_id}",
    )
    return signed
