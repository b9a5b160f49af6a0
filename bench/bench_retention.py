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
import tempfile
import time
from pathlib import Path

import asyncpg
from alembic import command
from alembic.config import Config

from xnode.core.cursors import Cursor
from xnode.core.prune_plan import Plan, PlanRange
from xnode.core.query import EnvelopeQuery
from xnode.devtools.postgres import start_cluster
from xnode.store.envelopes import EnvelopeStore
from xnode.store.migrate import migrations_dir, sqlalchemy_url
from xnode.store.partitions import EnvelopePartitions
from xnode.store.prune import prune
from xnode.store.replication import ReplicationStore

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


async def reads(pool: asyncpg.Pool, per_day: int) -> tuple[float, float]:
    """Milliseconds per topic query (100 envelopes) and per lookup of 100 sequence ids."""
    store = EnvelopeStore(pool)
    topic = bytes(32) + b"\x07"
    query = EnvelopeQuery(topics=(topic,), cursor=Cursor({}))
    lookups = ReplicationStore(pool)
    rounds = 50
    began = time.perf_counter()
    for _ in range(rounds):
        assert len(await store.query(query, 100)) == 100
    queried = (time.perf_counter() - began) / rounds * 1000
    began = time.perf_counter()
    for r in range(rounds):
        first = r * per_day // 2 + 1
        found = await lookups.stored_envelopes(NODE, list(range(first, first + 100)))
        assert len(found) == 100
    looked_up = (time.perf_counter() - began) / rounds * 1000
    return queried, looked_up


async def plans(pool: asyncpg.Pool) -> str:
    topic = bytes(32) + b"\x07"
    lines = []
    for sql, args in (
        (
            "EXPLAIN SELECT envelope FROM originator_envelopes WHERE originator_node_id = $1"
            " AND originator_sequence_id = ANY($2::bigint[])",
            [NODE, [5, 6]],
        ),
        (
            "EXPLAIN SELECT envelope FROM originator_envelopes WHERE topic = $1"
            " AND originator_node_id = $2 AND originator_sequence_id > 0"
            " AND (expiry_unixtime IS NULL OR expiry_unixtime > $3)"
            " ORDER BY originator_sequence_id LIMIT 100",
            [topic, NODE, START],
        ),
    ):
        plan = [r[0] for r in await pool.fetch(sql, *args)]
        scans = [line.strip() for line in plan if " on originator_envelopes" in line]
        lines.append(f"  {sql.split(' WHERE ')[1][:60]}...: {len(scans)} partitions,")
        lines.append(f"    first {scans[0][:110]}")
    return "\n".join(lines)


async def bench(dsn: str, revision: str, per_day: int, size: int, spread: int) -> None:
    await asyncio.to_thread(upgrade, dsn, revision)
    async with asyncpg.create_pool(dsn, min_size=1, max_size=2) as pool:
        wrote = await fill(pool, per_day, size, spread)
        queried, looked_up = await reads(pool, per_day)
        print(f"{revision}: wrote {30 * per_day} envelopes in {wrote:.1f} s")
        print(f"  topic query (100)          {queried:8.2f} ms")
        print(f"  100 sequence-id lookups    {looked_up:8.2f} ms")
        print(await plans(pool))
        end = START + 40 * DAY_S  # the last period holding the month has ended
        began = time.perf_counter()
        if revision == "0008":
            plan = Plan(end, 30 * per_day, (PlanRange(NODE, 1, 30 * per_day),))
            async with pool.acquire() as conn:
                deleted = (await prune(conn, plan, 5000))[NODE].deleted
        else:
            done = await EnvelopePartitions(pool).maintain(end, 200, 7)
            deleted = 30 * per_day - await pool.fetchval(
                "SELECT count(*) FROM originator_envelopes"
            )
            print(f"  dropped {len(done.dropped)} partitions, {done.keys_released} keys")
        took = time.perf_counter() - began
        print(f"  expired the month: {deleted} envelopes in {took:.2f} s")


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
        for revision in ("0008", "head"):
            name = f"r{revision}"
            cluster.create_database(name)
            await bench(cluster.dsn(name), revision, args.per_day, args.bytes, args.spread_days)
    finally:
        cluster.stop()


if __name__ == "__main__":
    asyncio.run(main())
