"""Retention benchmark: expiring a month of envelopes by dropping partitions (migration 0009,
xnode.store.partitions) against deleting them as `xnode prune` does on the table before it
(migration 0008), in two databases of one fresh cluster (fsync on), same rows in both:

- writing the month (one INSERT per day of envelopes: the key trigger's cost);
- reads: a topic query and sequence-id lookups within an originator, with the partitions;
- expiring the whole month: one retention run against the plan applied in batches.

    .venv/bin/python bench/bench_retention.py [--per-day 10000] [--bytes 600]

The rows are made in SQL (the store checks no signatures), `--per-day` a day for 30 days,
on 100 topics, their expiries spread over `--spread-days` from a day after the start; the
month is expired 40 days after the start (the last period holding it has ended)."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import asyncpg
from alembic import command
from alembic.config import Config

from xnode.core.cursors import Cursor
from xnode.core.partitions import DEFAULT_PERIOD_DAYS
from xnode.core.prune_plan import Plan, PlanRange
from xnode.core.query import EnvelopeQuery
from xnode.devtools.postgres import start_cluster
from xnode.store.envelopes import EnvelopeStore
from xnode.store.migrate import migrations_dir, sqlalchemy_url
from xnode.store.partitions import EnvelopePartitions
from xnode.store.prune import prune
from xnode.store.replication import _STORED, ReplicationStore

DAY_S = 86_400
NODE = 100
START = int(time.time())

# Day $1 of the month: $2 group messages of $3 bytes, originator time spread over the day,
# expiries spread evenly over $5 days from a day after START.
_DAY = f"""
INSERT INTO originator_envelopes
SELECT {NODE}, $1::bigint * $2 + g, ($4::bigint + $1 * {DAY_S} + g) * 1000000000,
       '\\x00'::bytea || decode(lpad(to_hex(g % 100), 64, '0'), 'hex'),
       $4 + {DAY_S} + ($1::bigint * $2 + g) * $5 * {DAY_S} / (30 * $2), '\\x01'::bytea,
       substr(decode(repeat(md5(g::text), $3 / 16 + 1), 'hex'), 1, $3), 0, 0
FROM generate_series(1, $2) AS g
"""


def upgrade(dsn: str, revision: str) -> None:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    config.set_main_option("sqlalchemy.url", sqlalchemy_url(dsn).replace("%", "%%"))
    command.upgrade(config, revision)


async def fill(pool: asyncpg.Pool, per_day: int, size: int, spread: int) -> float:
    began = time.perf_counter()
    for day in range(30):
        await pool.execute(_DAY, day, per_day, size, START, spread)
    took = time.perf_counter() - began
    await pool.execute(f"INSERT INTO vector_clock VALUES ({NODE}, {30 * per_day}, 0)")
    await pool.execute("VACUUM ANALYZE")
    return took


# How ReplicationStore.stored_envelopes read the one table (before envelope_keys).
_LOOKUP_0008 = (
    "SELECT originator_sequence_id, envelope FROM originator_envelopes"
    " WHERE originator_node_id = $1 AND originator_sequence_id = ANY($2::bigint[])"
)


async def lookup(pool: asyncpg.Pool, revision: str, ids: list[int]) -> int:
    if revision == "0008":
        return len(await pool.fetch(_LOOKUP_0008, NODE, ids))
    return len(await ReplicationStore(pool).stored_envelopes(NODE, ids))


async def reads(pool: asyncpg.Pool, per_day: int, revision: str) -> tuple[float, float]:
    """Milliseconds per topic query (100 envelopes) and per lookup of 100 sequence ids."""
    store = EnvelopeStore(pool)
    topic = bytes(32) + b"\x07"
    query = EnvelopeQuery(topics=(topic,), cursor=Cursor({}))
    rounds = 50
    began = time.perf_counter()
    for _ in range(rounds):
        assert len(await store.query(query, 100)) == 100
    queried = (time.perf_counter() - began) / rounds * 1000
    began = time.perf_counter()
    for r in range(rounds):
        first = r * per_day // 2 + 1
        assert await lookup(pool, revision, list(range(first, first + 100))) == 100
    looked_up = (time.perf_counter() - began) / rounds * 1000
    return queried, looked_up


async def plans(pool: asyncpg.Pool, revision: str) -> str:
    """How many partitions the two reads look in, and how many they visit (EXPLAIN ANALYZE)."""
    topic = bytes(32) + b"\x07"
    lookup_sql = _LOOKUP_0008 if revision == "0008" else _STORED
    lines = []
    for name, sql, args in (
        ("sequence-id lookup", lookup_sql, [NODE, [5, 6]]),
        (
            "topic query",
            "SELECT envelope FROM originator_envelopes WHERE topic = $1"
            " AND originator_node_id = $2 AND originator_sequence_id > 0"
            " AND (expiry_unixtime IS NULL OR expiry_unixtime > $3)"
            " ORDER BY originator_sequence_id LIMIT 100",
            [topic, NODE, START],
        ),
    ):
        plan = [r[0] for r in await pool.fetch("EXPLAIN (ANALYZE, COSTS OFF) " + sql, *args)]
        scans = [line for line in plan if " on originator_envelopes" in line]
        visited = [line for line in scans if "never executed" not in line]
        lines.append(f"  {name}: {len(scans)} partitions in the plan, {len(visited)} visited")
    return "\n".join(lines)


async def expire(pool: asyncpg.Pool, revision: str, per_day: int) -> str:
    end = START + 40 * DAY_S  # the last period holding the month has ended
    began = time.perf_counter()
    if revision == "0008":
        plan = Plan(end, 30 * per_day, (PlanRange(NODE, 1, 30 * per_day),))
        async with pool.acquire() as conn:
            deleted = (await prune(conn, plan, 5000))[NODE].deleted
        how = "prune"
    else:
        done = await EnvelopePartitions(pool).maintain(end, 200, DEFAULT_PERIOD_DAYS)
        deleted = 30 * per_day - await pool.fetchval("SELECT count(*) FROM originator_envelopes")
        how = f"{len(done.dropped)} partitions dropped, {done.keys_released} keys released"
    took = time.perf_counter() - began
    return f"{revision}: expired {deleted} envelopes in {took:.2f} s ({how})"


async def bench(pools: dict[str, asyncpg.Pool], per_day: int, size: int, spread: int) -> None:
    """Each phase alternates between the two databases, so a busy moment hits both."""
    for revision, pool in pools.items():
        wrote = await fill(pool, per_day, size, spread)
        print(f"{revision}: wrote {30 * per_day} envelopes in {wrote:.1f} s")
    timings: dict[str, list[tuple[float, float]]] = {revision: [] for revision in pools}
    for _ in range(5):
        for revision, pool in pools.items():
            timings[revision].append(await reads(pool, per_day, revision))
    for revision, pool in pools.items():
        queried = statistics.median(t[0] for t in timings[revision])
        looked_up = statistics.median(t[1] for t in timings[revision])
        print(f"{revision}, median of 5 rounds:")
        print(f"  topic query (100)          {queried:8.2f} ms")
        print(f"  100 sequence-id lookups    {looked_up:8.2f} ms")
        print(await plans(pool, revision))
    for revision, pool in pools.items():
        print(await expire(pool, revision, per_day))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-day", type=int, default=10_000)
    parser.add_argument("--bytes", type=int, default=600, help="per envelope")
    parser.add_argument(
        "--spread-days",
        type=int,
        default=30,
        help="days the expiries spread over (183: the"
        " default retention's steady state, every period holding envelopes)",
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="xnode-bench-retention-"))
    work.chmod(0o755)
    cluster = start_cluster(work / "pg", fsync=True)
    try:
        pools = {}
        for revision in ("0008", "head"):
            cluster.create_database(f"r{revision}")
            await asyncio.to_thread(upgrade, cluster.dsn(f"r{revision}"), revision)
            pools[revision] = await asyncpg.create_pool(
                cluster.dsn(f"r{revision}"), min_size=1, max_size=2
            )
        try:
            await bench(pools, args.per_day, args.bytes, args.spread_days)
        finally:
            for pool in pools.values():
                await pool.close()
    finally:
        cluster.stop()


if __name__ == "__main__":
    asyncio.run(main())
