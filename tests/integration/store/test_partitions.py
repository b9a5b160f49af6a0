"""The envelope table partitioned by expiry (migration 0009, xnode.store.partitions): a month of
envelopes expires by dropping partitions, no expired envelope is served meanwhile, leaves and
what never expires stay; (originator, sequence id) stays unique across partitions."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tests.conftest import NodeSpec, node_settings
from tests.integration.export.helpers import (
    DAY_S,
    NS_PER_S,
    Item,
    chain_row,
    group,
    received_row,
    write_plan,
)
from tests.integration.logs.test_migration import upgrade_to
from tests.support.waiting import eventually
from tests.unit.usecases.fakes import FixedClock
from xnode.core.crypto import SigningKey
from xnode.core.cursors import Cursor
from xnode.core.envelopes import IndexedEnvelope
from xnode.core.forks import newcomer_wins
from xnode.core.partitions import DEFAULT_PERIOD_DAYS, EXPIRED, LATER, NEVER, period_name
from xnode.core.prune_plan import Plan, PlanError, PlanRange
from xnode.core.query import EnvelopeQuery
from xnode.core.topics import Topic, TopicKind
from xnode.store.envelopes import EnvelopeStore
from xnode.store.forks import resolve_fork
from xnode.store.migrate import upgrade_to_head
from xnode.store.partitions import EnvelopePartitions, read_layout
from xnode.store.prune import ScheduledPlan, prune
from xnode.store.replication import _STORED, ReplicationStore

ORIGINATOR = 300
KEY = SigningKey.generate()
START = int(time.time())  # the migrated template's partitions start from the real now
HOUR_NS = 3600 * NS_PER_S
MESSAGE = Item(TopicKind.GROUP_MESSAGES, group(1), retention_days=1)
LONG = Item(TopicKind.GROUP_MESSAGES, group(2), retention_days=210)  # past the 200 days ahead
IDENTITY = Item(TopicKind.IDENTITY_UPDATES, group(3))
MESSAGE_TOPIC = Topic(MESSAGE.kind, MESSAGE.identifier).raw


@pytest.fixture
async def pool(database: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await asyncpg.create_pool(database, min_size=1, max_size=4)
    yield pool
    await pool.close()


def month(first_seq: int = 1) -> list[IndexedEnvelope]:
    """A month of messages kept a day, one every 4 hours from START; every 30th is kept
    210 days, every 45th is an identity update."""
    rows = []
    for i in range(30 * 6):
        item = IDENTITY if i % 45 == 44 else LONG if i % 30 == 29 else MESSAGE
        ns = START * NS_PER_S + i * 4 * HOUR_NS
        rows.append(received_row(ORIGINATOR, KEY, first_seq + i, ns, item))
    return rows


def period_of(expiry: int, days: int = DEFAULT_PERIOD_DAYS) -> str:
    """The period partition an expiry falls in (the template was migrated with the default
    period; the tests' own runs add weekly ones)."""
    return period_name(expiry // (days * DAY_S) * days * DAY_S)


async def count(pool: asyncpg.Pool, sql: str) -> int:
    value = await pool.fetchval(sql)
    assert isinstance(value, int)
    return value


async def sequence_ids(pool: asyncpg.Pool, table: str) -> set[int]:
    rows = await pool.fetch(
        f"SELECT originator_sequence_id FROM {table} WHERE originator_node_id = $1", ORIGINATOR
    )
    return {r[0] for r in rows}


async def served(pool: asyncpg.Pool, now: int) -> list[tuple[int, int]]:
    """(sequence id, expiry) of every envelope a query from the start serves at `now`."""
    store = EnvelopeStore(pool, FixedClock(now))
    query = EnvelopeQuery(topics=(), originators=(ORIGINATOR, 0), cursor=Cursor({}))
    return [(e.sequence_id, e.expiry) for e in await store.query(query, 10_000)]


async def test_a_month_expires_by_dropping_partitions(pool: asyncpg.Pool) -> None:
    rows = month()
    chain = [chain_row(0, s, START * NS_PER_S, MESSAGE) for s in (1, 2)]
    await ReplicationStore(pool).insert_received(rows + chain, "test")
    leaves = await count(pool, "SELECT count(*) FROM log_leaves")
    assert leaves == len(rows)
    partitions = EnvelopePartitions(pool)
    expiry = {e.sequence_id: e.expiry for e in rows}
    expiry_of = {e.raw: e.expiry for e in rows + chain}  # 0: never
    dropped: list[str] = []
    # Whatever day the suite runs, the migrated template's 30-day periods fall differently
    # against START: 62 days lets the period of the last day-long expiry (START + 31 days)
    # end and go for any alignment.
    for day in range(0, 62):
        now = START + day * DAY_S
        done = await partitions.maintain(now, ahead_days=200, period_days=7)
        assert not done.skipped
        dropped += done.dropped
        seen = await served(pool, now)
        ours = [(s, e) for s, e in seen if s in expiry and e == expiry[s]]
        assert all(e == 0 or e > now for _, e in seen), f"day {day}: an expired one served"
        newest = (await EnvelopeStore(pool, FixedClock(now)).newest([MESSAGE_TOPIC], 1 << 30))[0]
        newest_expiry = expiry_of[newest or b""]
        assert newest_expiry == 0 or newest_expiry > now, f"day {day}: an expired newest"
        # Everything unexpired is served: only expired envelopes went.
        assert {s for s, _ in ours} == {s for s, e in expiry.items() if e == 0 or e > now}
        # Stored: what lies at or past the first kept partition, whose end has not passed
        # (an expired envelope waits at most one period for its partition to go).
        current = await read_layout(pool)
        first_end = current.periods[0].upper
        assert first_end is not None and first_end - 1 > now, f"day {day}: an expired period kept"
        stored = {s for s, e in expiry.items() if e == 0 or e >= current.first_kept}
        assert await sequence_ids(pool, "originator_envelopes") == stored, f"day {day}"
    # Every period up to the month's end went, and with them every message kept a day.
    last = START + 61 * DAY_S
    assert period_of(START + 2 * DAY_S) in dropped
    kept = {e.sequence_id for e in rows if e.expiry == 0 or e.expiry > last}
    assert await sequence_ids(pool, "originator_envelopes") == kept
    assert await sequence_ids(pool, "envelope_keys") == kept
    # The log keeps every leaf (format 2 leaves name the expiry that explains the gap).
    assert await count(pool, "SELECT count(*) FROM log_leaves") == leaves
    assert await count(pool, "SELECT count(*) FROM originator_envelopes") == len(kept) + 2
    # The 210-day envelopes moved out of `later` into periods added as time went on.
    layout = await read_layout(pool)
    assert layout.horizon > max(expiry.values())
    assert await count(pool, f"SELECT count(*) FROM {LATER}") == 0
    assert await count(pool, f"SELECT count(*) FROM {EXPIRED}") == 0


async def test_a_sequence_id_is_stored_once_across_partitions(pool: asyncpg.Pool) -> None:
    store = ReplicationStore(pool)
    first = received_row(ORIGINATOR, KEY, 1, START * NS_PER_S, MESSAGE)
    # Another version of id 1 (a fork) whose expiry falls in another partition.
    other = received_row(ORIGINATOR, KEY, 1, START * NS_PER_S, LONG)
    assert await store.insert_received([first], "t") == [(ORIGINATOR, 1)]
    assert await store.insert_received([first, other], "t") == []
    rows = await pool.fetch(
        "SELECT tableoid::regclass::text, expiry_unixtime FROM originator_envelopes"
    )
    assert [tuple(r) for r in rows] == [(period_of(first.expiry), first.expiry)]


async def test_a_fork_replacing_across_partitions_keeps_its_key(pool: asyncpg.Pool) -> None:
    """The newcomer has another expiry: its row moves to another partition, and the key
    follows it (still guarding the id, now with the newcomer's expiry)."""
    store = ReplicationStore(pool)
    stored = received_row(ORIGINATOR, KEY, 1, START * NS_PER_S, MESSAGE)
    newcomer = received_row(ORIGINATOR, KEY, 1, START * NS_PER_S + 1, LONG)
    if not newcomer_wins(stored.raw, newcomer.raw):
        stored, newcomer = newcomer, stored
    await store.insert_received([stored], "t")
    async with pool.acquire() as conn, conn.transaction():
        resolution = await resolve_fork(conn, newcomer)
    assert resolution is not None and resolution.replaced
    rows = await pool.fetch("SELECT expiry_unixtime, envelope FROM originator_envelopes")
    assert [(r[0], bytes(r[1])) for r in rows] == [(newcomer.expiry, newcomer.raw)]
    assert await pool.fetchval("SELECT expiry_unixtime FROM envelope_keys") == newcomer.expiry
    assert await store.insert_received([stored], "t") == []
    assert await count(pool, "SELECT count(*) FROM originator_envelopes") == 1


async def test_runs_at_once_take_turns(database: str) -> None:
    """Several processes (or nodes) sharing the database: the lock makes one run wait or
    skip, never two add the same period."""
    pools = [await asyncpg.create_pool(database, min_size=1, max_size=1) for _ in range(3)]
    try:
        runs = [EnvelopePartitions(p).maintain(START, 400, 7) for p in pools]
        done = await asyncio.gather(*runs)
        layout = await read_layout(pools[0])
    finally:
        await asyncio.gather(*(p.close() for p in pools))
    added = [name for d in done for name in d.added]
    assert len(added) == len(set(added)) > 0
    assert layout.horizon >= START + 400 * DAY_S


async def test_a_plan_deletes_only_in_the_partition_of_the_row_it_found(
    pool: asyncpg.Pool,
) -> None:
    """Row ids repeat across partitions: the first row of two partitions has the same one."""
    expired = received_row(ORIGINATOR, KEY, 1, (START - 30 * DAY_S) * NS_PER_S, MESSAGE)
    kept = received_row(ORIGINATOR + 1, KEY, 1, START * NS_PER_S, LONG)
    await ReplicationStore(pool).insert_received([expired, kept], "t")
    places = await pool.fetch("SELECT ctid, tableoid FROM originator_envelopes")
    assert len({r[0] for r in places}) == 1 and len({r[1] for r in places}) == 2, places
    plan = Plan(START, 1, (PlanRange(ORIGINATOR, 1, 1),))
    async with pool.acquire() as conn:
        result = await prune(conn, plan, batch_size=10)
    assert result[ORIGINATOR].deleted == 1
    rows = await pool.fetch("SELECT originator_node_id FROM originator_envelopes")
    assert [r[0] for r in rows] == [ORIGINATOR + 1]
    assert await count(pool, "SELECT count(*) FROM envelope_keys") == 1


async def test_the_node_runs_retention_on_its_schedule(
    database: str, node_spec: NodeSpec, start_node: Any
) -> None:
    await start_node(**node_settings(database, node_spec, retention_partitions_ahead_days=300))
    conn = await asyncpg.connect(database)
    try:
        await eventually(
            lambda: horizon_past(conn, int(time.time()) + 300 * DAY_S),
            what="the node's first retention run adding 300 days of partitions",
        )
    finally:
        await conn.close()


async def horizon_past(conn: asyncpg.Connection, at: int) -> bool:
    return (await read_layout(conn)).horizon >= at


def test_xnode_partitions_by_hand(database: str) -> None:
    env = {**os.environ, "XNODE_DATABASE_DSN": database}
    now = START + 30 * DAY_S
    run = [sys.executable, "-m", "xnode.cli", "partitions", "--now", str(now)]
    done = subprocess.run(run, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"dropped {period_of(START)}" in done.stdout
    assert f"added {period_of(now + 200 * DAY_S - 1)}" in done.stdout
    again = subprocess.run(run, env=env, capture_output=True, text=True, timeout=120)
    assert again.stdout.strip() == "nothing to add or drop"


async def test_a_plan_file_is_applied_once_per_version(pool: asyncpg.Pool, tmp_path: Path) -> None:
    """The node applies the Spark job's plan when it changes (`retention_plan_file`): rows
    that expired in a partition still kept go before the partition does."""
    # Two days of messages kept a day, from three days ago: all expired by START.
    first_ns = (START - 3 * DAY_S) * NS_PER_S
    rows = [
        received_row(ORIGINATOR, KEY, i, first_ns + (i - 1) * 4 * HOUR_NS, MESSAGE)
        for i in range(1, 13)
    ]
    await ReplicationStore(pool).insert_received(rows, "t")
    path = tmp_path / "plan.json"
    scheduled = ScheduledPlan(pool, path)
    assert await scheduled.apply_if_new() is None  # no plan yet
    # A plan judged a day from now is refused, deleting nothing (core.prune_plan.check_as_of).
    write_plan(path, [(ORIGINATOR, 1, 12)], int(time.time()) + DAY_S)
    with pytest.raises(PlanError, match="ahead of this node's clock"):
        await scheduled.apply_if_new()
    assert await count(pool, "SELECT count(*) FROM originator_envelopes") == 12
    write_plan(path, [(ORIGINATOR, 1, 12)], int(time.time()))
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 1))  # a new version of the file
    assert await scheduled.apply_if_new() == 12
    assert await scheduled.apply_if_new() is None  # the same file: not again
    assert await count(pool, "SELECT count(*) FROM originator_envelopes") == 0
    assert await count(pool, "SELECT count(*) FROM log_leaves") == 12


async def test_an_upgrade_from_0008_keeps_every_envelope(empty_database: str) -> None:
    await asyncio.to_thread(upgrade_to, empty_database, "0008")
    at = START * NS_PER_S
    current = received_row(ORIGINATOR, KEY, 2, at + 7 * DAY_S * NS_PER_S, MESSAGE)
    rows = {
        # Before the period holding the upgrade's now: the `expired` partition.
        EXPIRED: received_row(ORIGINATOR, KEY, 1, at - 41 * DAY_S * NS_PER_S, MESSAGE),
        period_of(current.expiry): current,
        LATER: received_row(ORIGINATOR, KEY, 3, at, dataclasses.replace(LONG, retention_days=250)),
        NEVER: received_row(ORIGINATOR, KEY, 4, at, IDENTITY),
    }
    conn = await asyncpg.connect(empty_database)
    try:
        await conn.executemany(
            "INSERT INTO originator_envelopes VALUES ($1, $2, $3, $4, $5, $6, $7, 1, 2)",
            [
                (e.originator_node_id, e.sequence_id, e.originator_ns, e.topic,
                 e.expiry or None, e.payer_address, e.raw)
                for e in rows.values()
            ],
        )  # fmt: skip
        usage = await conn.fetchval("SELECT sum(envelopes) FROM payer_usage")
        await asyncio.to_thread(upgrade_to_head, empty_database)
        places = await conn.fetch(
            "SELECT tableoid::regclass::text, originator_sequence_id, envelope"
            " FROM originator_envelopes"
        )
        keys = await conn.fetchval("SELECT count(*) FROM envelope_keys")
        # Still counted once, and still enforced and counted after the upgrade.
        assert await conn.fetchval("SELECT sum(envelopes) FROM payer_usage") == usage == 4
        async with asyncpg.create_pool(empty_database, min_size=1, max_size=1) as pool:
            store = ReplicationStore(pool)
            assert await store.insert_received(list(rows.values()), "t") == []
            fifth = received_row(ORIGINATOR, KEY, 5, at, MESSAGE)
            assert await store.insert_received([fifth], "t") == [(ORIGINATOR, 5)]
        assert await conn.fetchval("SELECT sum(envelopes) FROM payer_usage") == 5
    finally:
        await conn.close()
    by_place = {r[0]: (r[1], bytes(r[2])) for r in places}
    assert by_place == {name: (e.sequence_id, e.raw) for name, e in rows.items()}
    assert keys == 4


async def test_lookups_by_sequence_id_visit_one_partition(pool: asyncpg.Pool) -> None:
    at = START * NS_PER_S
    rows = [
        received_row(ORIGINATOR, KEY, 1, at, MESSAGE),
        received_row(ORIGINATOR, KEY, 2, at, LONG),
        received_row(ORIGINATOR, KEY, 3, at, IDENTITY),
        received_row(ORIGINATOR, KEY, 4, at + 9 * DAY_S * NS_PER_S, MESSAGE),
    ]
    store = ReplicationStore(pool)
    await store.insert_received(rows, "t")
    found = await store.stored_envelopes(ORIGINATOR, [1, 2, 3, 4, 5])
    assert found == {e.sequence_id: e.raw for e in rows}
    ranged = await EnvelopeStore(pool).originator_range(ORIGINATOR, 1, 4)
    assert [(e.sequence_id, e.raw) for e in ranged] == [(e.sequence_id, e.raw) for e in rows[1:]]
    plan = await pool.fetch(
        "EXPLAIN (ANALYZE, COSTS OFF) "
        + _STORED.replace("$1", str(ORIGINATOR)).replace("$2", "$1"),
        [4],
    )
    scanned = [r[0] for r in plan if " on originator_envelopes_" in r[0]]
    visited = [line for line in scanned if "never executed" not in line]
    of = "SELECT count(*) FROM pg_inherits WHERE inhparent = 'originator_envelopes'::regclass"
    partitions = await count(pool, of)
    assert len(scanned) == partitions and len(visited) == 2, visited  # its period, and `never`


async def test_a_fork_within_a_partition_is_found_by_its_new_expiry(pool: asyncpg.Pool) -> None:
    """The key follows an expiry changed in place, so lookups still find the row."""
    middle = (START // (7 * DAY_S) * 7 * DAY_S + 3 * DAY_S) * NS_PER_S  # a day's retention on
    stored = received_row(ORIGINATOR, KEY, 1, middle, MESSAGE)
    newcomer = received_row(ORIGINATOR, KEY, 1, middle + 2 * NS_PER_S, MESSAGE)
    if not newcomer_wins(stored.raw, newcomer.raw):
        stored, newcomer = newcomer, stored
    store = ReplicationStore(pool)
    await store.insert_received([stored], "t")
    async with pool.acquire() as conn, conn.transaction():
        resolution = await resolve_fork(conn, newcomer)
    assert resolution is not None and resolution.replaced
    assert period_of(stored.expiry) == period_of(newcomer.expiry)
    assert await store.stored_envelopes(ORIGINATOR, [1]) == {1: newcomer.raw}
