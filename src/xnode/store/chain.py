"""Chain indexer state and chain payloads in Postgres (asyncpg).

One indexed block range is one transaction: its envelopes, where they were mined, their
identity associations, skipped events, block hashes and the new progress, so a crash or a
lost connection leaves either all of it or none of it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import asyncpg

from xnode.core.chain_index import ChainProgress, IndexedRange
from xnode.core.chain_payloads import ChainPayload, SkippedEvent
from xnode.core.constants import CHAIN_ORIGINATORS, IDENTITY_UPDATES_ORIGINATOR
from xnode.core.envelopes import StoredEnvelope
from xnode.core.identity import association_changes, normalize_identifier
from xnode.store.errors import driver_errors_translated
from xnode.store.notifications import NOTIFY_CHANNEL, commit_notice

_INSERT_PAYLOADS = """
WITH rows AS (
    SELECT * FROM unnest($1::int[], $2::bigint[], $3::bigint[], $4::bytea[], $5::bytea[],
                         $6::bigint[], $7::bytea[], $8::bytea[], $9::int[], $10::bytea[])
        AS r(originator_node_id, originator_sequence_id, originator_ns, topic, envelope,
             block_number, block_hash, transaction_hash, log_index, payer_address)
), inserted AS (
    INSERT INTO originator_envelopes (originator_node_id, originator_sequence_id,
                                      originator_ns, topic, expiry_unixtime, envelope,
                                      payer_address)
    SELECT originator_node_id, originator_sequence_id, originator_ns, topic, NULL, envelope,
           payer_address
    FROM rows
    -- a sequence id already stored is skipped (migration 0009's envelope_keys trigger)
    RETURNING originator_node_id, originator_sequence_id, topic, envelope
), located AS (
    INSERT INTO chain_payloads
    SELECT r.originator_node_id, r.originator_sequence_id, r.block_number, r.block_hash,
           r.transaction_hash, r.log_index
    FROM rows r JOIN inserted i USING (originator_node_id, originator_sequence_id)
), clock AS (
    INSERT INTO vector_clock (originator_node_id, sequence_id)
    SELECT originator_node_id, max(originator_sequence_id) FROM inserted GROUP BY 1
    ON CONFLICT (originator_node_id)
    DO UPDATE SET sequence_id = GREATEST(vector_clock.sequence_id, excluded.sequence_id)
)
SELECT originator_node_id, originator_sequence_id, topic, envelope FROM inserted
ORDER BY originator_node_id, originator_sequence_id
"""

_RECORD_GAS = """
INSERT INTO payer_usage AS u (payer_address, originator_node_id, day, gas_wei)
VALUES ($1, $2, date '1970-01-01' + ($3::bigint / 86400000000000)::integer, $4::numeric)
ON CONFLICT (payer_address, originator_node_id, day)
DO UPDATE SET gas_wei = u.gas_wei + excluded.gas_wei
"""

_INSERT_ASSOCIATIONS = """
INSERT INTO identity_associations
SELECT * FROM unnest($1::text[], $2::smallint[], $3::text[], $4::bool[], $5::bigint[],
                     $6::int[])
ON CONFLICT DO NOTHING
"""

_INSERT_SKIPPED = """
INSERT INTO chain_skipped_events (contract, block_number, block_hash, transaction_hash,
                                  log_index, sequence_id, reason, data)
SELECT * FROM unnest($1::text[], $2::bigint[], $3::bytea[], $4::bytea[], $5::int[],
                     $6::bigint[], $7::text[], $8::bytea[])
ON CONFLICT (block_hash, log_index) DO NOTHING
"""

_SAVE_BLOCKS = """
INSERT INTO chain_blocks (block_number, block_hash)
SELECT * FROM unnest($1::bigint[], $2::bytea[])
ON CONFLICT (block_number) DO UPDATE SET block_hash = excluded.block_hash
"""

_SAVE_PROGRESS = """
INSERT INTO chain_progress (contract, address, block_number, block_hash)
SELECT c, a, $3, $4 FROM unnest($1::text[], $2::bytea[]) AS t(c, a)
ON CONFLICT (contract) DO UPDATE
SET address = excluded.address, block_number = excluded.block_number,
    block_hash = excluded.block_hash, updated_at = now()
"""

_REWIND = """
WITH gone AS (
    DELETE FROM chain_payloads WHERE block_number > $1
    RETURNING originator_node_id, originator_sequence_id
)
DELETE FROM originator_envelopes e USING gone g
WHERE e.originator_node_id = g.originator_node_id
  AND e.originator_sequence_id = g.originator_sequence_id
"""

_RESET_CLOCK = """
UPDATE vector_clock v
SET sequence_id = COALESCE(
    (SELECT max(originator_sequence_id) FROM chain_payloads p
     WHERE p.originator_node_id = v.originator_node_id), 0)
WHERE v.originator_node_id = ANY($1::int[])
RETURNING originator_node_id, sequence_id
"""

_LATEST_ON_TOPIC = """
SELECT (SELECT max(e.originator_sequence_id) FROM originator_envelopes e
        WHERE e.topic = t.topic AND e.originator_node_id = t.originator)
FROM unnest($1::bytea[], $2::int[]) WITH ORDINALITY AS t(topic, originator, i)
ORDER BY t.i
"""

_COUNT_AFTER = """
SELECT (SELECT count(*) FROM originator_envelopes e
        WHERE e.topic = t.topic AND e.originator_node_id = t.originator
          AND e.originator_sequence_id > t.after)
FROM unnest($1::bytea[], $2::int[], $3::bigint[]) WITH ORDINALITY AS t(topic, originator, after, i)
ORDER BY t.i
"""

_BY_TRANSACTION = """
SELECT p.transaction_hash, p.log_index, e.envelope
FROM chain_payloads p
JOIN originator_envelopes e USING (originator_node_id, originator_sequence_id)
WHERE p.transaction_hash = ANY($1::bytea[])
"""

_INBOX_IDS = """
SELECT k.i, r.inbox_id
FROM unnest($1::text[], $2::smallint[]) WITH ORDINALITY AS k(identifier, kind, i)
LEFT JOIN LATERAL (
    SELECT l.inbox_id FROM (
        SELECT DISTINCT ON (a.inbox_id) a.inbox_id, a.associated, a.sequence_id, a.action_index
        FROM identity_associations a
        WHERE a.identifier = k.identifier AND a.identifier_kind = k.kind
        ORDER BY a.inbox_id, a.sequence_id DESC, a.action_index DESC
    ) AS l
    WHERE l.associated
    ORDER BY l.sequence_id DESC, l.action_index DESC
    LIMIT 1
) AS r ON true
ORDER BY k.i
"""

_INBOX_CLAIMS = """
SELECT k.i, COALESCE(r.inboxes, '{}')
FROM unnest($1::text[], $2::smallint[]) WITH ORDINALITY AS k(identifier, kind, i)
LEFT JOIN LATERAL (
    SELECT array_agg(l.inbox_id ORDER BY l.sequence_id DESC, l.action_index DESC) AS inboxes
    FROM (
        SELECT DISTINCT ON (a.inbox_id) a.inbox_id, a.associated, a.sequence_id, a.action_index
        FROM identity_associations a
        WHERE a.identifier = k.identifier AND a.identifier_kind = k.kind
        ORDER BY a.inbox_id, a.sequence_id DESC, a.action_index DESC
    ) AS l
    WHERE l.associated
) AS r ON true
ORDER BY k.i
"""


def _payload_columns(payloads: Sequence[ChainPayload]) -> list[list[object]]:
    rows = [
        (
            p.event.originator,
            p.event.sequence_id,
            p.originator_ns,
            p.topic,
            p.raw,
            p.event.block_number,
            p.event.block_hash,
            p.event.transaction_hash,
            p.event.log_index,
            p.payer_address,
        )
        for p in payloads
    ]
    return [list(c) for c in zip(*rows, strict=True)] if rows else [[] for _ in range(10)]


def _association_columns(payloads: Sequence[ChainPayload]) -> list[list[object]]:
    rows = [
        (c.identifier, int(c.kind), c.inbox_id, c.associated, p.event.sequence_id, c.action_index)
        for p in payloads
        if p.identity_update is not None
        for c in association_changes(p.identity_update)
    ]
    return [list(c) for c in zip(*rows, strict=True)] if rows else [[] for _ in range(6)]


def _skipped_columns(skipped: Sequence[SkippedEvent]) -> list[list[object]]:
    rows = [
        (
            s.contract,
            s.block_number,
            s.block_hash,
            s.transaction_hash,
            s.log_index,
            s.sequence_id,
            s.reason,
            s.data,
        )
        for s in skipped
    ]
    return [list(c) for c in zip(*rows, strict=True)] if rows else [[] for _ in range(8)]


@driver_errors_translated
class ChainStore:
    """The chain side's store (chain.ports.ChainStorage)."""

    def __init__(self, pool: asyncpg.Pool, notice_token: str) -> None:
        self.pool = pool
        self._token = notice_token

    async def progress(self) -> dict[str, ChainProgress]:
        rows = await self.pool.fetch(
            "SELECT contract, address, block_number, block_hash FROM chain_progress"
        )
        return {r[0]: ChainProgress(bytes(r[1]), r[2], bytes(r[3])) for r in rows}

    async def recent_blocks(self, up_to: int, limit: int) -> list[tuple[int, bytes]]:
        """Stored block hashes at or below `up_to`, newest first."""
        rows = await self.pool.fetch(
            "SELECT block_number, block_hash FROM chain_blocks WHERE block_number <= $1"
            " ORDER BY block_number DESC LIMIT $2",
            up_to,
            limit,
        )
        return [(r[0], bytes(r[1])) for r in rows]

    async def commit_range(self, indexed: IndexedRange) -> list[StoredEnvelope]:
        """Stores one indexed range; returns the envelopes that were new, in order."""
        async with self.pool.acquire() as conn, conn.transaction():
            rows = await conn.fetch(_INSERT_PAYLOADS, *_payload_columns(indexed.payloads))
            stored = [StoredEnvelope(r[0], r[1], r[2], r[3]) for r in rows]
            await conn.execute(_INSERT_ASSOCIATIONS, *_association_columns(indexed.payloads))
            if indexed.skipped:
                await conn.execute(_INSERT_SKIPPED, *_skipped_columns(indexed.skipped))
            await conn.execute(_SAVE_BLOCKS, list(indexed.blocks), list(indexed.blocks.values()))
            await conn.execute(
                "DELETE FROM chain_blocks WHERE block_number < $1", indexed.keep_blocks_from
            )
            await conn.execute(
                _SAVE_PROGRESS,
                list(indexed.addresses),
                list(indexed.addresses.values()),
                *indexed.tip,
            )
            if stored:
                keys = [(e.originator_node_id, e.sequence_id) for e in stored]
                notice = commit_notice(self._token, keys)
                await conn.execute("SELECT pg_notify($1, $2)", NOTIFY_CHANNEL, notice)
        return stored

    async def rewind(
        self, block_number: int, block_hash: bytes, addresses: Mapping[str, bytes]
    ) -> tuple[int, dict[int, int]]:
        """Forgets everything indexed above `block_number` (a re-org dropped it). Returns how
        many envelopes were deleted and the chain originators' new highest sequence ids."""
        async with self.pool.acquire() as conn, conn.transaction():
            status = await conn.execute(_REWIND, block_number)
            deleted = int(status.split()[-1])
            top_identity = await conn.fetchval(
                "SELECT COALESCE(max(originator_sequence_id), 0) FROM chain_payloads"
                " WHERE originator_node_id = $1",
                IDENTITY_UPDATES_ORIGINATOR,
            )
            await conn.execute(
                "DELETE FROM identity_associations WHERE sequence_id > $1", top_identity
            )
            await conn.execute("DELETE FROM chain_blocks WHERE block_number > $1", block_number)
            await conn.execute(
                _SAVE_PROGRESS, list(addresses), list(addresses.values()), block_number, block_hash
            )
            rows = await conn.fetch(_RESET_CLOCK, list(CHAIN_ORIGINATORS))
        return deleted, {r[0]: r[1] for r in rows}

    async def latest_sequence_ids(self, keys: Sequence[tuple[bytes, int]]) -> list[int]:
        """The highest stored sequence id of each (topic, chain originator); 0 when none."""
        rows = await self.pool.fetch(_LATEST_ON_TOPIC, [k[0] for k in keys], [k[1] for k in keys])
        return [r[0] or 0 for r in rows]

    async def count_after(self, keys: Sequence[tuple[bytes, int, int]]) -> list[int]:
        """Per (topic, chain originator, sequence id): how many stored payloads follow it."""
        rows = await self.pool.fetch(
            _COUNT_AFTER, [k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys]
        )
        return [int(r[0]) for r in rows]

    async def envelopes_by_transaction(
        self, transaction_hashes: Sequence[bytes]
    ) -> dict[tuple[bytes, int], bytes]:
        """Stored envelopes mined by these transactions, by (tx hash, log index)."""
        rows = await self.pool.fetch(_BY_TRANSACTION, list(transaction_hashes))
        return {(bytes(r[0]), r[1]): bytes(r[2]) for r in rows}

    async def record_gas(
        self, payer_address: bytes, originator: int, originator_ns: int, wei: int
    ) -> None:
        await self.pool.execute(_RECORD_GAS, payer_address, originator, originator_ns, wei)

    async def inbox_claims(self, identifiers: Sequence[tuple[str, int]]) -> list[list[str]]:
        """Per identifier, the inboxes whose latest indexed action on it associates it (claims,
        not yet validated: usecases.identity replays them), latest first."""
        normalized = [normalize_identifier(i, k) for i, k in identifiers]
        known = [(i, n) for i, n in enumerate(normalized) if n is not None]
        answers: list[list[str]] = [[] for _ in identifiers]
        if not known:
            return answers
        rows = await self.pool.fetch(
            _INBOX_CLAIMS, [n[0] for _, n in known], [int(n[1]) for _, n in known]
        )
        for (index, _), row in zip(known, rows, strict=True):
            answers[index] = list(row[1])
        return answers

    async def inbox_ids(self, identifiers: Sequence[tuple[str, int]]) -> list[str | None]:
        normalized = [normalize_identifier(i, k) for i, k in identifiers]
        known = [(i, n) for i, n in enumerate(normalized) if n is not None]
        answers: list[str | None] = [None] * len(identifiers)
        if not known:
            return answers
        rows = await self.pool.fetch(
            _INBOX_IDS, [n[0] for _, n in known], [int(n[1]) for _, n in known]
        )
        for (index, _), row in zip(known, rows, strict=True):
            answers[index] = row[1]
        return answers
