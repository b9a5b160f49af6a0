"""Scrub benchmark (replication.scrub), each figure beside its bound:

- one unthrottled pass over `--envelopes` stored envelopes (each leaf read with its
  envelope, the leaf and the originator signature checked): leaves/s and CPU per leaf
  (this process and the Postgres cluster, Linux /proc);
- `--seconds` of the background scrub at `--rate` (the setting's default, 120/s: 10 million
  envelopes a day): the rate it kept and the share of one core it took (bound: 5%).

    .venv/bin/python bench/bench_scrub.py [--envelopes 20000] [--rate 120] [--seconds 20]

The envelopes are real signed ones of one originator, stored as a replica stores them
(ReplicationStore.insert_received: leaves, trees), in a fresh cluster (fsync on)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
import time
from pathlib import Path

import asyncpg
from bench_logs import cpu_seconds, postgres_cpu
from bench_repair import NODE, signed_envelopes

from xnode.core.crypto import SigningKey
from xnode.devtools.postgres import PgCluster, start_cluster
from xnode.observability.outage import DatabaseOutage
from xnode.replication.scrub import Scrub
from xnode.store.migrate import upgrade_to_head
from xnode.store.replication import ReplicationStore
from xnode.store.scrub import ScrubStore

DAY_S = 86_400
CPU_BOUND = 0.05  # of one core


def _cpu(cluster: PgCluster) -> float:
    return cpu_seconds(os.getpid(), with_children=False) + postgres_cpu(cluster)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envelopes", type=int, default=20_000)
    parser.add_argument("--rate", type=float, default=120.0, help="scrub_envelopes_per_second")
    parser.add_argument("--seconds", type=float, default=20.0, help="of the throttled run")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="xnode-bench-scrub-"))
    work.chmod(0o755)
    cluster = start_cluster(work / "pg", fsync=True)
    try:
        cluster.create_database("scrub")
        dsn = cluster.dsn("scrub")
        await asyncio.to_thread(upgrade_to_head, dsn)
        key = SigningKey.generate()
        envelopes = signed_envelopes(list(range(1, args.envelopes + 1)), key)
        pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
        assert pool is not None
        try:
            store = ReplicationStore(pool)
            for i in range(0, len(envelopes), 1000):
                await store.insert_received(envelopes[i : i + 1000], "bench")
            await pool.execute("VACUUM ANALYZE")
            keys = {NODE: key.public_key}
            source = ScrubStore(pool)

            cpu, wall = _cpu(cluster), time.perf_counter()
            count = await Scrub(source, 0, keys=lambda: keys).one_pass()
            wall, cpu = time.perf_counter() - wall, _cpu(cluster) - cpu
            assert count.checked == args.envelopes, count
            print(f"unthrottled pass: {count.checked} leaves in {wall:.2f} s")
            print(f"  rate            {count.checked / wall:10.0f} leaves/s")
            print(f"  CPU per leaf    {cpu / count.checked * 1e6:10.1f} us (process + Postgres)")
            per_day = DAY_S * CPU_BOUND / (cpu / count.checked)
            print(f"  at 5% of a core {per_day / 1e6:10.1f} M leaves/day (bound: 10 M)")

            scrub = Scrub(source, args.rate, keys=lambda: keys)
            cpu, wall = _cpu(cluster), time.perf_counter()
            scrub.start(DatabaseOutage(lambda: f"127.0.0.1:{cluster.port}"))
            await asyncio.sleep(args.seconds)
            await scrub.stop()
            wall, cpu = time.perf_counter() - wall, _cpu(cluster) - cpu
            checked = scrub.checked
            print(f"throttled at {args.rate:g}/s for {wall:.1f} s: {checked} leaves")
            print(f"  rate            {checked / wall:10.1f} leaves/s (setting {args.rate:g})")
            print(f"  core share      {cpu / wall * 100:10.2f} % (bound: {CPU_BOUND * 100:g} %)")
            print(f"  10 M envelopes  {10e6 / (checked / wall) / 3600:10.1f} h (bound: 24 h)")
        finally:
            await pool.close()
    finally:
        with contextlib.suppress(Exception):
            cluster.stop()


if __name__ == "__main__":
    asyncio.run(main())
