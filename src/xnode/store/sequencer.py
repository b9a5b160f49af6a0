"""The originator's sequencer: gap-free sequence ids, assigned and stored atomically.

The counter is this node's row in `vector_clock` (not a Postgres sequence, so a rolled-back
batch leaves no gap). Two ways to append, both serialized by that row:

- fast: remember the last id and timestamp, sign, then claim and insert in ONE autocommit
  statement that only inserts if the row still holds the remembered id (one round trip);
- locked: when another process sharing the database got there first, lock the row FOR UPDATE
  in a transaction, read it, sign and insert. This always succeeds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import asyncpg

from xnode.core.checkpoints import envelope_leaf, has_log
from xnode.core.crypto import SIGNATURE_LENGTH, SigningKey, originator_digest, sign_digests
from xnode.core.envelopes import (
    IndexedEnvelope,
    Originable,
    signed_originator,
    unsigned_originator,
)
from xnode.core.fees import FeeSchedule, Pricing
from xnode.core.leaves import content_hash_of
from xnode.core.merkle import Frontier
from xnode.runtime.crypto_threads import (
    has_signing_process,
    in_crypto_thread,
    in_signing_process,
)
from xnode.store.connection import PgConnection
from xnode.store.errors import driver_errors_translated
from xnode.store.logs import STORED_MIN_LEVEL, extend_tree, node_columns
from xnode.store.notifications import NOTIFY_CHANNEL

_READ_CLOCK = "SELECT sequence_id, last_ns FROM vector_clock WHERE originator_node_id = $1"
_LOCK_CLOCK = _READ_CLOCK + " FOR UPDATE"

# Past what peers hold of this node's own log: timestamps continue after the newest stored.
_RESUME_AFTER = """
UPDATE vector_clock SET
    sequence_id = GREATEST(sequence_id, $2),
    last_ns = GREATEST(last_ns, COALESCE(
        (SELECT max(originator_ns) FROM originator_envelopes WHERE originator_node_id = $1), 0))
WHERE originator_node_id = $1
"""

# Parameters: $1..$7 the envelope columns ($1 this node, $2 and $3 the first id and time:
# a batch's ids and times are consecutive, and an array costs the driver per element to
# encode), $8 the last id, $9 its time, $10 this node, $11
# and $12 the notification, $13 and $14 the signed fees (the payer_usage trigger sums them),
# $15 the payer digests (migration 0010: replays are refused by them);
# then per statement: the fast path's remembered id and time ($16, $17) and tree nodes
# ($18..$20), and the log leaves (last). A statement without the log (setting
# `log_commit_enabled` false, or an id without a log) takes a prefix of the same arguments.
_ROWS = """
    SELECT $1::int, $2::bigint + r.i - 1, $3::bigint + r.i - 1, r.topic, r.expiry, r.payer,
           r.raw, r.base, r.congestion, r.digest
    FROM unnest($4::bytea[], $5::bigint[], $6::bytea[], $7::bytea[], $13::bigint[], $14::bigint[],
                $15::bytea[])
        WITH ORDINALITY AS r(topic, expiry, payer, raw, base, congestion, digest, i)"""


def _leaf_rows(joined: str, hashes: str) -> str:
    """This node's log leaves (xnode.store.logs), written with the envelopes: sequence ids
    are the envelopes' (from $2), leaf hashes come joined in one bytea (32 bytes each; an array
    costs the driver per element to encode) and each fingerprint is its hash's first
    8 bytes as a signed bigint (core.reconciliation.fingerprint_part); the expiry each
    format 2 leaf commits to is the envelope's, and its content hash (the leaf's opening)
    comes joined like the leaves."""
    leaf = f"substr({joined}::bytea, r.i::int * 32 - 31, 32)"
    fingerprint = f"('x' || encode(substr({leaf}, 1, 8), 'hex'))::bit(64)::bigint"
    expiry = "coalesce(($5::bigint[])[r.i], 0)"  # the leaf's committed expiry ($5: NULL = 0)
    content_hash = f"substr({hashes}::bytea, r.i::int * 32 - 31, 32)"
    rows = "generate_series(1, cardinality($7::bytea[])) AS r(i)"
    columns = f"{leaf}, {fingerprint}, {expiry}, {content_hash}"
    return f"SELECT $10, $2::bigint + r.i - 1, {columns} FROM {rows}"


# If the row moved on (another process appended), `claimed` is empty and nothing is inserted.
# envelope_keys would skip a reused id regardless (migration 0009). The fast path also
# carries the tree nodes the batch completes ($18..$20), computed from the frontier this
# process holds, which is the tree up to $16 (the remembered id): so the tree grows in the
# same statement.
# The remembered time ($17) is checked too: a batch signed on top of one still being written
# (Sequencer.append) must not claim a row that reached the same id by other envelopes (the
# earlier batch missed and was signed again by the locked path, always at later times).
_CLAIM = f"""
WITH claimed AS (
    UPDATE vector_clock SET sequence_id = $8, last_ns = $9
    WHERE originator_node_id = $10 AND sequence_id = $16 AND last_ns = $17
    RETURNING 1
), inserted AS (
    INSERT INTO originator_envelopes
    {_ROWS} WHERE EXISTS (SELECT 1 FROM claimed)
    RETURNING 1
)"""
_CLAIMED = "SELECT (SELECT count(*) FROM inserted), (SELECT pg_notify($11, $12) FROM claimed)"
_CLAIM_AND_APPEND = f"""{_CLAIM}, leaves AS (
    INSERT INTO log_leaves {_leaf_rows("$21", "$22")} WHERE EXISTS (SELECT 1 FROM claimed)
), nodes AS (
    INSERT INTO log_nodes
    SELECT $10, * FROM unnest($18::smallint[], $19::bigint[], $20::bytea[]) AS n
    WHERE EXISTS (SELECT 1 FROM claimed)
), tree AS (
    UPDATE log_trees SET tree_size = $8
    WHERE originator_node_id = $10 AND EXISTS (SELECT 1 FROM claimed)
)
{_CLAIMED}
"""
_CLAIM_AND_APPEND_UNLOGGED = f"{_CLAIM}\n{_CLAIMED}\n"

_LOCKED = f"""
WITH inserted AS (
    INSERT INTO originator_envelopes {_ROWS}
), clock AS (
    UPDATE vector_clock SET sequence_id = $8, last_ns = $9 WHERE originator_node_id = $10
)"""
_APPEND_LOCKED = f"""{_LOCKED}, leaves AS (
    INSERT INTO log_leaves {_leaf_rows("$16", "$17")}
)
SELECT pg_notify($11, $12)
"""
_APPEND_LOCKED_UNLOGGED = f"{_LOCKED}\nSELECT pg_notify($11, $12)\n"

# Payer envelopes this node originated, by the digest their payer signed (migration 0010).
_HELD = """
SELECT payer_digest, envelope FROM originator_envelopes
WHERE payer_digest = ANY($2::bytea[]) AND originator_node_id = $1
"""

# Callers of the locked path without a schedule (tests, tools) sign zero fees.
FREE = Pricing(FeeSchedule())

# Batches this large are signed in a worker thread: libsecp256k1 releases the GIL, so the
# event loop keeps validating and answering meanwhile.
THREAD_SIGNING_MIN = 32


class _Growing(Frontier):
    """A copy of the tree's frontier being grown by a batch, with the nodes it completed."""

    completed: list[tuple[int, int, bytes]]


def _timestamps(count: int, last_ns: int, now_ns: int) -> list[int]:
    """Strictly increasing originator timestamps, even if the wall clock steps back."""
    first = max(now_ns, last_ns + 1)
    return [first + i for i in range(count)]


async def _sign(
    batch: Sequence[Originable],
    node_id: int,
    last_seq: int,
    last_ns: int,
    now_ns: int,
    key: SigningKey,
    pricing: Pricing,
    frontier: _Growing | None = None,
    logged: bool = True,
) -> list[IndexedEnvelope]:
    """Signs the batch; with a frontier, also appends the batch's leaves to it (in the same
    worker thread for large batches: hashing is CPU the event loop need not spend).
    `logged` False: no leaf hashes (a node not committing its log)."""
    stamps = _timestamps(len(batch), last_ns, now_ns)
    fees = pricing.batch([(len(p.raw), p.retention_days) for p in batch], now_ns)

    first_id = last_seq + 1

    def unsigned_all() -> list[tuple[bytes, int]]:
        return [
            unsigned_originator(payer, node_id, first_id + i, stamps[i], fees[i])
            for i, payer in enumerate(batch)
        ]

    def signed_all(
        unsigned: list[tuple[bytes, int]], signatures: list[bytes]
    ) -> list[IndexedEnvelope]:
        signed = [
            signed_originator(
                payer, node_id, first_id + i, stamps[i], *unsigned[i], signatures[i], fees[i],
                logged,
            )
            for i, payer in enumerate(batch)
        ]  # fmt: skip
        if frontier is not None:
            frontier.completed = frontier.extend([e.leaf for e in signed], STORED_MIN_LEVEL)
        return signed

    def sign_all() -> list[IndexedEnvelope]:
        unsigned = unsigned_all()
        return signed_all(unsigned, [key.sign(originator_digest(u)) for u, _ in unsigned])

    if len(batch) < THREAD_SIGNING_MIN:
        return sign_all()
    if not has_signing_process():
        return await in_crypto_thread(sign_all)
    # The envelopes are built here and only their digests signed in the process.
    unsigned = unsigned_all()
    digests = b"".join(originator_digest(envelope) for envelope, _ in unsigned)
    joined = await in_signing_process(sign_digests, key.secret, digests)
    size = SIGNATURE_LENGTH
    return signed_all(unsigned, [joined[i : i + size] for i in range(0, len(joined), size)])


def _joined_leaves(signed: list[IndexedEnvelope]) -> tuple[bytes, bytes]:
    """The leaves, and their content hashes (the leaves' openings), each joined."""
    leaves = b"".join(e.leaf or envelope_leaf(e.raw) for e in signed)
    return leaves, b"".join(content_hash_of(e.raw) for e in signed)


def _arguments(
    signed: list[IndexedEnvelope], node_id: int, notice: str, batch: Sequence[Originable]
) -> tuple[object, ...]:
    """$1..$15 of the statements above (_sign gives consecutive ids and times)."""
    first, last = signed[0], signed[-1]
    return (
        node_id,
        first.sequence_id,
        first.originator_ns,
        [e.topic for e in signed],
        [e.expiry or None for e in signed],
        [e.payer_address for e in signed],
        [e.raw for e in signed],
        last.sequence_id,
        last.originator_ns,
        node_id,
        NOTIFY_CHANNEL,
        f"{notice}|{node_id}:{last.sequence_id}",
        [e.base_fee for e in signed],
        [e.congestion_fee for e in signed],
        [p.payer_digest or None for p in batch],
    )


async def _append_locked(
    conn: PgConnection,
    node_id: int,
    key: SigningKey,
    batch: Sequence[Originable],
    now_ns: int,
    notice_token: str,
    pricing: Pricing,
    logged: bool = True,
    after_ns: int = 0,
) -> tuple[list[IndexedEnvelope], Frontier | None]:
    """`after_ns`: the batch's times come after it (and after the row's)."""
    row = await conn.fetchrow(_LOCK_CLOCK, node_id)
    if row is None:
        raise RuntimeError(f"vector clock row for node {node_id} is missing")
    logged = logged and has_log(node_id)
    last_ns = max(row[1], after_ns)
    signed = await _sign(batch, node_id, row[0], last_ns, now_ns, key, pricing, logged=logged)
    arguments = _arguments(signed, node_id, notice_token, batch)
    if not logged:
        await conn.execute(_APPEND_LOCKED_UNLOGGED, *arguments)
        return signed, None
    await conn.execute(_APPEND_LOCKED, *arguments, *_joined_leaves(signed))
    return signed, await extend_tree(conn, node_id)


async def append_originated(
    conn: PgConnection,
    node_id: int,
    key: SigningKey,
    batch: Sequence[Originable],
    now_ns: int,
    notice_token: str,
    pricing: Pricing = FREE,
) -> list[IndexedEnvelope]:
    """The locked path; the caller owns the transaction."""
    signed, _ = await _append_locked(conn, node_id, key, batch, now_ns, notice_token, pricing)
    return signed


@driver_errors_translated
class Sequencer:
    """Appends batches for one node; the fast path when this process is the only appender."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        node_id: int,
        key: SigningKey,
        notice_token: str,
        pricing: Pricing | None = None,
        commit_log: bool = True,
    ) -> None:
        """`commit_log` False: no leaves, tree nodes or tree size are written (settings
        `log_commit_enabled`)."""
        self._pool = pool
        self._commit_log = commit_log and has_log(node_id)
        self._pricing = pricing or Pricing(FeeSchedule())
        self._node_id = node_id
        self._key = key
        self._notice = notice_token
        # (sequence id, ns) and this node's log tree after the last batch signed: committed,
        # or being written (the next batch is signed on top of it meanwhile).
        self._last: tuple[int, int] | None = None
        self._frontier: Frontier | None = None
        self._signed_ns = 0  # the latest time signed: a batch signed again goes after it
        self._signing = asyncio.Lock()
        # Whether the last batch signed for the fast path was stored as signed (unset while
        # its claim is out).
        self._written: asyncio.Future[bool] | None = None
        # Set once the last batch taken is stored (by either path) or failed; `_ticket`
        # counts batches taken, so a batch signed again knows whether a later one is out.
        self._stored: asyncio.Future[None] | None = None
        self._ticket = 0
        self.fast_appends = 0
        self.locked_appends = 0
        self.fast_misses = 0  # signed for the fast path, found the row moved: signed again

    async def append(self, batch: Sequence[Originable], now_ns: int) -> list[IndexedEnvelope]:
        """Safe to call concurrently: batches are signed one at a time, in call order, each
        on top of the one before, and the fast path's statement goes out without waiting
        for the previous batch's: signing the next batch overlaps the previous one's write
        and fsync. Postgres holds a claim on the clock row until the previous one commits;
        a claim that got there first finds the row short and is sent again once the
        previous batch is stored (a claim that finds the row short inserts nothing). A batch
        whose claim missed (another process took the ids, or its predecessor was not stored
        as signed) is signed again by the locked path once every earlier batch is stored:
        ids always follow call order, and a miss never refuses the batch."""
        loop = asyncio.get_running_loop()
        stored: asyncio.Future[None] = loop.create_future()
        try:
            async with self._signing:
                self._ticket += 1
                ticket, before, self._stored = self._ticket, self._stored, stored
                fast = self._in_sync()
                if fast:
                    signed, statement = await self._sign_fast(batch, now_ns)
                    previous, written = self._written, loop.create_future()
                    self._written = written
                else:
                    self._written = None
            if fast:
                if await self._claim_fast(statement, len(signed), previous, written):
                    self.fast_appends += 1
                    return signed
                self.fast_misses += 1
                self._forget()
            if before is not None:
                await asyncio.wait([before])  # not `await`: a cancel here must not cancel it
            async with self._signing:  # after every time signed so far (`_signed_ns`)
                return await self._locked(batch, now_ns, ticket)
        finally:
            stored.set_result(None)

    async def _claim_fast(
        self,
        statement: tuple[object, ...],
        count: int,
        previous: asyncio.Future[bool] | None,
        written: asyncio.Future[bool],
    ) -> bool:
        """Whether the batch was stored as signed; `written` tells the next batch."""
        claimed = False
        try:
            claimed = await self._claim(statement, count)
            if not claimed and previous is not None:
                await asyncio.wait([previous])  # not `await`: a cancel must not cancel it
                if previous.result():
                    claimed = await self._claim(statement, count)
        except BaseException:
            self._forget()  # the outcome is unknown: read the row before the next batch
            raise
        finally:
            written.set_result(claimed)
        return claimed

    async def _claim(self, statement: tuple[object, ...], count: int) -> bool:
        query, *arguments = statement
        assert isinstance(query, str)
        row = await self._pool.fetchrow(query, *arguments)
        assert row is not None
        return bool(row[0] == count)

    def appended_elsewhere(self, sequence_id: int) -> None:
        """Another process sharing the database (a worker of this node) appended this node's
        log up to `sequence_id`: the next batch takes the locked path at once, rather than
        signing for a fast path that would find the row moved."""
        if self._last is not None and sequence_id > self._last[0]:
            self._last = None

    def _in_sync(self) -> bool:
        """The fast path needs the clock and the whole tree up to it (when logged)."""
        if not self._commit_log:
            return self._last is not None
        return bool(self._last and self._frontier and self._frontier.size == self._last[0])

    def _forget(self) -> None:
        self._last = None
        self._frontier = None

    def _advance(self, signed: list[IndexedEnvelope]) -> None:
        """The next batch is signed after this one."""
        last = signed[-1]
        self._last = (last.sequence_id, last.originator_ns)
        self._signed_ns = max(self._signed_ns, last.originator_ns)

    async def _locked(
        self, batch: Sequence[Originable], now_ns: int, ticket: int
    ) -> list[IndexedEnvelope]:
        """Called after every earlier batch is stored. The next batch is signed on top of
        this one only if none was taken after it: a later batch already out was signed on
        top of this one's first signature, so it will miss and come here too, and a batch
        taken meanwhile must wait for it (else it could claim ids before it)."""
        try:
            async with self._pool.acquire() as conn, conn.transaction():
                signed, frontier = await _append_locked(
                    conn,
                    self._node_id,
                    self._key,
                    batch,
                    now_ns,
                    self._notice,
                    self._pricing,
                    self._commit_log,
                    self._signed_ns,
                )
        except BaseException:
            self._forget()
            raise
        self.locked_appends += 1
        if ticket != self._ticket:
            self._signed_ns = max(self._signed_ns, signed[-1].originator_ns)
            return signed
        self._frontier = frontier
        self._advance(signed)
        return signed

    async def _sign_fast(
        self, batch: Sequence[Originable], now_ns: int
    ) -> tuple[list[IndexedEnvelope], tuple[object, ...]]:
        """Signs on top of the last batch signed (committed or not) and moves past it; the
        signed batch and its claiming statement with arguments."""
        assert self._last is not None
        last_seq, last_ns = self._last
        if not self._commit_log:
            signed = await _sign(
                batch, self._node_id, last_seq, last_ns, now_ns, self._key, self._pricing,
                None, False,
            )  # fmt: skip
            arguments = _arguments(signed, self._node_id, self._notice, batch)
            self._advance(signed)
            return signed, (_CLAIM_AND_APPEND_UNLOGGED, *arguments, last_seq, last_ns)
        assert self._frontier is not None
        frontier = _Growing(self._frontier.size, list(self._frontier.peaks))
        signed = await _sign(
            batch, self._node_id, last_seq, last_ns, now_ns, self._key, self._pricing, frontier
        )
        arguments = _arguments(signed, self._node_id, self._notice, batch)
        nodes = node_columns(frontier.completed)
        self._frontier = frontier
        self._advance(signed)
        leaves = _joined_leaves(signed)
        return signed, (_CLAIM_AND_APPEND, *arguments, last_seq, last_ns, *nodes, *leaves)

    async def held(self, digests: Sequence[bytes]) -> dict[bytes, bytes]:
        """{payer digest: the originator envelope stored} of the payer envelopes among
        `digests` this node originated already (usecases.originator.Held)."""
        rows = await self._pool.fetch(_HELD, self._node_id, list(digests))
        return {bytes(r[0]): bytes(r[1]) for r in rows}

    async def resume_after(self, sequence_id: int) -> None:
        """The next id signed is above `sequence_id` (and above what is stored): peers hold
        this node's envelopes up to it, e.g. after a restore from an older backup."""
        await self._pool.execute(_RESUME_AFTER, self._node_id, sequence_id)
        await self.prime()

    async def prime(self) -> None:
        """Reads the clock and this node's log tree (growing it over any leaves it lacks) so
        the first batch can take the fast path."""
        row = await self._pool.fetchrow(_READ_CLOCK, self._node_id)
        self._last = (row[0], row[1]) if row is not None else None
        if not self._commit_log:
            return
        async with self._pool.acquire() as conn, conn.transaction():
            self._frontier = await extend_tree(conn, self._node_id)
