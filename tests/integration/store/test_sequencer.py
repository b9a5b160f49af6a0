"""The sequencer on a real Postgres: gap-free ids under concurrency, across pools, and
after a failed transaction."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest

from tests.support.waiting import eventually_value
from xnode.client.node import group_message_envelope
from xnode.core.checkpoints import envelope_leaf
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import (
    IndexedEnvelope,
    ValidPayerEnvelope,
    build_payer_envelope,
    originate,
    validate_payer_envelope,
)
from xnode.core.fees import Fees
from xnode.core.merkle import Frontier
from xnode.core.reconciliation import fingerprint_part
from xnode.replication.verifiers import BulkVerifiers, start_bulk
from xnode.runtime import crypto_threads
from xnode.store.identity import WrongNodeError, claim_database
from xnode.store.logs import STORED_MIN_LEVEL
from xnode.store.sequencer import THREAD_SIGNING_MIN, Sequencer, append_originated

NODE = 100
KEY = SigningKey.generate()
PAYER = SigningKey.generate()


def envelopes(n: int, tag: str = "") -> list[ValidPayerEnvelope]:
    return [
        validate_payer_envelope(
            build_payer_envelope(
                group_message_envelope(b"g" * 16, f"{tag}{i}".encode()), PAYER, NODE
            ),
            NODE,
        )
        for i in range(n)
    ]


async def append(pool: asyncpg.Pool, batch: list[ValidPayerEnvelope]) -> list[int]:
    async with pool.acquire() as conn, conn.transaction():
        done = await append_originated(conn, NODE, KEY, batch, time.time_ns(), "test")
    return [e.sequence_id for e in done]


async def stored(pool: asyncpg.Pool) -> list[tuple[int, int]]:
    rows = await pool.fetch(
        "SELECT originator_sequence_id, originator_ns FROM originator_envelopes"
        " WHERE originator_node_id = $1 ORDER BY 1",
        NODE,
    )
    return [(r[0], r[1]) for r in rows]


async def test_two_pools_appending_concurrently_give_one_gap_free_sequence(database: str) -> None:
    pools = [await asyncpg.create_pool(database, min_size=4, max_size=4) for _ in range(2)]
    await claim_database(pools[0], NODE, KEY.public_key)
    batch = envelopes(5)
    await asyncio.gather(*(append(pools[i % 2], batch) for i in range(40)))
    rows = await stored(pools[0])
    assert [seq for seq, _ in rows] == list(range(1, 201))
    stamps = [ns for _, ns in rows]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)  # strictly increasing
    clock = await pools[0].fetchval(
        "SELECT sequence_id FROM vector_clock WHERE originator_node_id = $1", NODE
    )
    assert clock == 200
    for pool in pools:
        await pool.close()


async def test_rolled_back_batch_leaves_no_gap(database: str) -> None:
    pool = await asyncpg.create_pool(database, min_size=1, max_size=2)
    await claim_database(pool, NODE, KEY.public_key)
    await append(pool, envelopes(3))
    with pytest.raises(RuntimeError):
        async with pool.acquire() as conn, conn.transaction():
            await append_originated(conn, NODE, KEY, envelopes(4), time.time_ns(), "test")
            raise RuntimeError("crash before commit")
    assert await append(pool, envelopes(2)) == [4, 5]
    assert [seq for seq, _ in await stored(pool)] == [1, 2, 3, 4, 5]
    await pool.close()


async def test_timestamps_never_go_back_when_the_clock_does(database: str) -> None:
    pool = await asyncpg.create_pool(database, min_size=1, max_size=2)
    await claim_database(pool, NODE, KEY.public_key)
    future = time.time_ns() + 3_600 * 10**9
    async with pool.acquire() as conn, conn.transaction():
        await append_originated(conn, NODE, KEY, envelopes(1), future, "test")
    await append(pool, envelopes(1))  # wall clock is an hour "behind" the last stamp
    (_, first), (_, second) = await stored(pool)
    assert second == first + 1
    await pool.close()


async def test_database_of_another_node_is_refused(database: str) -> None:
    pool = await asyncpg.create_pool(database, min_size=1, max_size=2)
    await claim_database(pool, NODE, KEY.public_key)
    await claim_database(pool, NODE, KEY.public_key)  # same node again: fine
    with pytest.raises(WrongNodeError, match="belongs to node 100"):
        await claim_database(pool, 200, SigningKey.generate().public_key)
    await pool.close()


async def _two_processes(
    database: str, min_size: int, max_size: int, prefix: str
) -> tuple[list[asyncpg.Pool], list[Sequencer]]:
    """Two pools (two processes of one node) on one claimed database, a primed sequencer each."""
    pools = [
        await asyncpg.create_pool(database, min_size=min_size, max_size=max_size) for _ in range(2)
    ]
    await claim_database(pools[0], NODE, KEY.public_key)
    sequencers = [Sequencer(pool, NODE, KEY, f"{prefix}{i}") for i, pool in enumerate(pools)]
    for sequencer in sequencers:
        await sequencer.prime()
    return pools, sequencers


async def test_racing_sequencers_fall_back_to_locking_and_stay_gap_free(database: str) -> None:
    pools, sequencers = await _two_processes(database, 2, 4, "p")

    async def run(sequencer: Sequencer, rounds: int) -> list[int]:
        ids: list[int] = []
        for r in range(rounds):
            done = await sequencer.append(envelopes(3, f"r{r}"), time.time_ns())
            ids += [e.sequence_id for e in done]
        return ids

    first, second = await asyncio.gather(run(sequencers[0], 30), run(sequencers[1], 30))
    assert sorted(first + second) == list(range(1, 181))
    assert [seq for seq, _ in await stored(pools[0])] == list(range(1, 181))
    fast = sum(s.fast_appends for s in sequencers)
    locked = sum(s.locked_appends for s in sequencers)
    assert fast > 0 and locked > 0, (fast, locked)  # both paths were exercised
    for pool in pools:
        await pool.close()


@pytest.mark.parametrize("told", [True, False])
async def test_a_sequencer_told_of_another_workers_append_does_not_sign_in_vain(
    database: str, told: bool
) -> None:
    """Workers of one node (xnode.workers) hear of each other's appends by NOTIFY: told, the
    next batch goes to the locked path without first signing for a fast path that fails."""
    pools = [await asyncpg.create_pool(database, min_size=1, max_size=2) for _ in range(2)]
    await claim_database(pools[0], NODE, KEY.public_key)
    first, second = (Sequencer(pool, NODE, KEY, f"w{i}") for i, pool in enumerate(pools))
    for sequencer in (first, second):
        await sequencer.prime()
    done = await first.append(envelopes(3, "a"), time.time_ns())
    if told:
        second.appended_elsewhere(done[-1].sequence_id)
    await second.append(envelopes(2, "b"), time.time_ns())
    assert (second.locked_appends, second.fast_misses) == (1, 0 if told else 1)
    await second.append(envelopes(2, "c"), time.time_ns())
    assert second.fast_appends == 1  # back on the fast path
    assert [seq for seq, _ in await stored(pools[0])] == list(range(1, 8))
    for pool in pools:
        await pool.close()


async def test_lone_sequencer_takes_the_one_statement_path(database: str) -> None:
    pool = await asyncpg.create_pool(database, min_size=1, max_size=2)
    await claim_database(pool, NODE, KEY.public_key)
    sequencer = Sequencer(pool, NODE, KEY, "solo")
    await sequencer.prime()
    for _ in range(5):
        await sequencer.append(envelopes(2), time.time_ns())
    assert (sequencer.fast_appends, sequencer.locked_appends) == (5, 0)
    assert [seq for seq, _ in await stored(pool)] == list(range(1, 11))
    await pool.close()


async def test_resuming_after_what_peers_hold_skips_those_ids_and_keeps_time_order(
    database: str,
) -> None:
    pool = await asyncpg.create_pool(database, min_size=1, max_size=2)
    await claim_database(pool, NODE, KEY.public_key)
    sequencer = Sequencer(pool, NODE, KEY, "test")
    await sequencer.prime()
    later = time.time_ns() + 3_600 * 10**9
    async with pool.acquire() as conn, conn.transaction():  # as if replicated back from a peer
        await append_originated(conn, NODE, KEY, envelopes(3), later, "test")
    await pool.execute("UPDATE vector_clock SET last_ns = 0 WHERE originator_node_id = $1", NODE)
    await sequencer.resume_after(20)  # a peer holds up to 20 (some expired, not stored here)
    signed = await sequencer.append(envelopes(2, "new"), time.time_ns())
    assert [e.sequence_id for e in signed] == [21, 22]
    assert signed[0].originator_ns > later  # after the newest stored, whatever the wall clock
    await sequencer.resume_after(5)  # never back
    assert [e.sequence_id for e in await sequencer.append(envelopes(1), time.time_ns())] == [23]
    await pool.close()


async def test_sequencer_not_committing_its_log_stores_the_same_envelopes_and_no_log(
    database: str,
) -> None:
    pools = [await asyncpg.create_pool(database, min_size=1, max_size=2) for _ in range(2)]
    await claim_database(pools[0], NODE, KEY.public_key)
    first, second = (
        Sequencer(p, NODE, KEY, f"u{i}", commit_log=False) for i, p in enumerate(pools)
    )
    await first.prime()
    await second.prime()
    signed = await first.append(envelopes(3, "a"), time.time_ns())
    # Each finds the row moved by the other: signed again on the locked path.
    signed += await second.append(envelopes(40, "b"), time.time_ns())  # signed in a thread
    signed += await first.append(envelopes(2, "c"), time.time_ns())
    assert (first.fast_appends, first.locked_appends, first.fast_misses) == (1, 1, 1)
    assert (second.fast_appends, second.locked_appends, second.fast_misses) == (0, 1, 1)
    rows = await pools[0].fetch(
        "SELECT originator_sequence_id, envelope FROM originator_envelopes"
        " WHERE originator_node_id = $1 ORDER BY 1",
        NODE,
    )
    assert [(r[0], bytes(r[1])) for r in rows] == [(e.sequence_id, e.raw) for e in signed]
    assert [e.sequence_id for e in signed] == list(range(1, 46))
    assert all(e.leaf == b"" for e in signed)  # not even hashed
    for table in ("log_leaves", "log_nodes", "log_trees", "log_checkpoints"):
        assert await pools[0].fetchval(f"SELECT count(*) FROM {table}") == 0, table
    for pool in pools:
        await pool.close()


async def test_leaves_written_with_the_envelopes_are_their_hashes_and_fingerprints(
    database: str,
) -> None:
    pools = [await asyncpg.create_pool(database, min_size=1, max_size=2) for _ in range(2)]
    await claim_database(pools[0], NODE, KEY.public_key)
    first, second = (Sequencer(p, NODE, KEY, f"l{i}") for i, p in enumerate(pools))
    await first.prime()
    await second.prime()
    signed = await first.append(envelopes(3, "a"), time.time_ns())  # fast
    signed += await second.append(envelopes(40, "b"), time.time_ns())  # locked, in a thread
    signed += await first.append(envelopes(2, "c"), time.time_ns())  # locked
    signed += await first.append(envelopes(50, "d"), time.time_ns())  # fast, in a thread
    assert (first.fast_appends, second.locked_appends) == (2, 1)
    rows = await pools[0].fetch(
        "SELECT sequence_id, leaf_hash, fingerprint FROM log_leaves"
        " WHERE originator_node_id = $1 ORDER BY 1",
        NODE,
    )
    expected = [(e.sequence_id, envelope_leaf(e.raw)) for e in signed]
    assert [(r[0], bytes(r[1])) for r in rows] == expected
    assert [r[2] for r in rows] == [fingerprint_part(leaf) for _, leaf in expected]
    assert any(r[2] < 0 for r in rows) and any(r[2] > 0 for r in rows)  # both signs
    size = await pools[0].fetchval(
        "SELECT tree_size FROM log_trees WHERE originator_node_id = $1", NODE
    )
    assert size == len(signed)
    for pool in pools:
        await pool.close()


async def test_batches_appended_without_waiting_for_the_previous_take_the_fast_path(
    database: str,
) -> None:
    """Each batch is signed on top of the one still being written (Originator's in_flight):
    Postgres holds its claim until that one commits, so none misses."""
    pool = await asyncpg.create_pool(database, min_size=1, max_size=8)
    await claim_database(pool, NODE, KEY.public_key)
    sequencer = Sequencer(pool, NODE, KEY, "pipelined")
    await sequencer.prime()
    batches = [envelopes(40, f"b{i}-") for i in range(8)]
    done = await asyncio.gather(*(sequencer.append(b, time.time_ns()) for b in batches))
    assert [e.sequence_id for batch in done for e in batch] == list(range(1, 321))
    assert (sequencer.fast_appends, sequencer.locked_appends, sequencer.fast_misses) == (8, 0, 0)
    rows = await stored(pool)
    assert rows == [(e.sequence_id, e.originator_ns) for batch in done for e in batch]
    stamps = [ns for _, ns in rows]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    raws = await pool.fetch(
        "SELECT envelope FROM originator_envelopes WHERE originator_node_id = $1 ORDER BY"
        " originator_sequence_id",
        NODE,
    )
    assert [r[0] for r in raws] == [e.raw for batch in done for e in batch]
    await pool.close()


async def tree_as_rebuilt(pool: asyncpg.Pool, signed: list[IndexedEnvelope]) -> None:
    """The stored log (leaves, tree nodes, size) is the one the signed envelopes make,
    whichever process and path wrote each part."""
    frontier = Frontier()
    expected = frontier.extend([envelope_leaf(e.raw) for e in signed], STORED_MIN_LEVEL)
    rows = await pool.fetch(
        "SELECT level, node_index, hash FROM log_nodes WHERE originator_node_id = $1", NODE
    )
    assert sorted((r[0], r[1], bytes(r[2])) for r in rows) == sorted(expected)
    size = await pool.fetchval(
        "SELECT tree_size FROM log_trees WHERE originator_node_id = $1", NODE
    )
    assert size == len(signed)


async def stored_as_signed(pool: asyncpg.Pool, signed: list[IndexedEnvelope]) -> None:
    rows = await pool.fetch(
        "SELECT originator_sequence_id, originator_ns, envelope FROM originator_envelopes"
        " WHERE originator_node_id = $1 ORDER BY 1",
        NODE,
    )
    ordered = sorted(signed, key=lambda e: e.sequence_id)
    assert [(r[0], r[1], bytes(r[2])) for r in rows] == [
        (e.sequence_id, e.originator_ns, e.raw) for e in ordered
    ]
    assert [e.sequence_id for e in ordered] == list(range(1, len(signed) + 1))
    stamps = [e.originator_ns for e in ordered]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    await tree_as_rebuilt(pool, ordered)


async def claim_waiting(pool: asyncpg.Pool) -> None:
    """Until a fast-path claim waits on the clock row's lock (deadline 10 s)."""

    async def waiting() -> int:
        return int(
            await pool.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND query LIKE '%WITH claimed AS%'"
            )
        )

    await eventually_value(waiting, (1).__eq__, 10, "a claim waiting on the clock row")


async def test_pipelined_batches_overtaken_by_another_process_are_signed_again_not_refused(
    database: str,
) -> None:
    """Process P has two batches in flight, signed on top of each other; process Q takes
    ids in between (its locked path, holding the row while P's claims wait). Both of P's
    claims then find the row moved: both batches are signed again after Q's, in call order,
    and P's next batch is back on the fast path."""
    pools = [await asyncpg.create_pool(database, min_size=1, max_size=4) for _ in range(2)]
    await claim_database(pools[0], NODE, KEY.public_key)
    process = Sequencer(pools[0], NODE, KEY, "p")
    await process.prime()
    signed = await process.append(envelopes(3, "a"), time.time_ns())
    async with pools[1].acquire() as other, other.transaction():
        await other.fetchrow(
            "SELECT 1 FROM vector_clock WHERE originator_node_id = $1 FOR UPDATE", NODE
        )
        first = asyncio.create_task(process.append(envelopes(40, "b"), time.time_ns()))
        second = asyncio.create_task(process.append(envelopes(40, "c"), time.time_ns()))
        # The first claim waits on the row; the second, sent meanwhile, found the row short
        # of the first and waits for the first's outcome (or is still being signed or sent:
        # each way, it must come out the same).
        await claim_waiting(pools[0])
        signed += await append_originated(other, NODE, KEY, envelopes(5, "q"), time.time_ns(), "q")
    pipelined = [await first, await second]
    assert [e.sequence_id for e in pipelined[0]] == list(range(9, 49))
    assert [e.sequence_id for e in pipelined[1]] == list(range(49, 89))
    assert (process.fast_appends, process.fast_misses, process.locked_appends) == (1, 2, 2)
    signed += pipelined[0] + pipelined[1]
    signed += await process.append(envelopes(2, "d"), time.time_ns())
    assert process.fast_appends == 2
    await stored_as_signed(pools[0], signed)
    for pool in pools:
        await pool.close()


async def test_two_processes_each_with_batches_in_flight_share_one_sequence(
    database: str,
) -> None:
    """Two sequencers on one database (two processes of one node), each appending several
    batches at once, round after round: nothing refused, ids gap-free, each process's
    batches in its call order, the log tree as the envelopes make it."""
    pools, sequencers = await _two_processes(database, 1, 6, "s")

    async def rounds(sequencer: Sequencer, name: str) -> list[IndexedEnvelope]:
        out: list[IndexedEnvelope] = []
        for r in range(6):
            sizes = [1, 40, 3, 35][: 2 + r % 3]
            batches = [envelopes(n, f"{name}{r}-{b}-") for b, n in enumerate(sizes)]
            done = await asyncio.gather(*(sequencer.append(b, time.time_ns()) for b in batches))
            ids = [e.sequence_id for batch in done for e in batch]
            assert ids == sorted(ids), "a process's batches are stored in its call order"
            out += [e for batch in done for e in batch]
        return out

    results = await asyncio.gather(*(rounds(s, f"p{i}") for i, s in enumerate(sequencers)))
    await stored_as_signed(pools[0], results[0] + results[1])
    assert sum(s.fast_misses for s in sequencers) > 0  # the processes did overtake each other
    for pool in pools:
        await pool.close()


async def test_batches_signed_in_a_signing_process_are_those_signed_here(database: str) -> None:
    """The sequencer of several workers signs in a process of its own (runtime.crypto_threads):
    the stored envelopes and leaves are byte for byte what signing in this process gives."""
    pool = await asyncpg.create_pool(database, min_size=1, max_size=2)
    await claim_database(pool, NODE, KEY.public_key)
    sequencer = Sequencer(pool, NODE, KEY, "process")
    await sequencer.prime()
    process = BulkVerifiers(1)
    batches = [envelopes(THREAD_SIGNING_MIN, "p"), envelopes(THREAD_SIGNING_MIN + 9, "q")]
    try:
        start_bulk(process, 1)
        crypto_threads.configure(1, process)
        signed = [e for b in batches for e in await sequencer.append(b, time.time_ns())]
    finally:
        crypto_threads.configure(1)
        process.shutdown()
    here = [
        originate(
            payer, NODE, e.sequence_id, e.originator_ns, KEY, Fees(e.base_fee, e.congestion_fee)
        )
        for payer, e in zip([p for b in batches for p in b], signed, strict=True)
    ]
    assert [e.raw for e in signed] == [e.raw for e in here]
    assert [e.leaf for e in signed] == [e.leaf for e in here]
    assert [seq for seq, _ in await stored(pool)] == list(range(1, len(here) + 1))
    raws = await pool.fetch(
        "SELECT envelope FROM originator_envelopes ORDER BY originator_sequence_id"
    )
    assert [bytes(r[0]) for r in raws] == [e.raw for e in here]
    assert sequencer.fast_appends == 2
    await pool.close()
