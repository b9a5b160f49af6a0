"""High availability benchmark: publish throughput with the synchronous standby against
without it (the same primary, the same run), failover times, and query latency from a read
replica against the primary (docs/ha.md).

    .venv/bin/python bench/bench_ha.py [--seconds 8] [--rounds 2] [--callers 32]
        [--stored 50000] [--queries 2000] [--parts throughput,failover,reads]
        [--faults kill,stop]

Starts etcd and two Patroni members (xnode.devtools.patroni). Throughput: an `xnode run`
process on a database whose commits wait for the standby (synchronous_commit on) and one on a
database of the same primary that does not wait (synchronous_commit local), alternated.
Failover: a node on the multi-host DSN publishes while the primary's host is killed (kill -9:
its port refuses connections) or frozen (SIGSTOP: its kernel accepts connections that nothing
answers, as behind a network that drops packets); timed are the promotion (Patroni's REST
/primary answering on the standby), when each way of finding the primary sees it
(xnode.store.primary.Database, the node's way, against Patroni's REST endpoints), and the
node's first answered publish after the promotion. Reads: two
databases of the same primary loaded alike, one node reading the synchronous standby as its
replica (XNODE_DATABASE_REPLICA_DSN) and one reading the primary, queried in turn after a
warm-up pass each.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg
import grpc
from bench_node import (
    NODE,
    PAYER,
    load_stored,
    percentile,
    query_latency,
    run_callers,
    start_node_process,
)

from xnode.client.node import NodeClient
from xnode.core.crypto import SigningKey
from xnode.devtools.patroni import HaCluster, Member, start_ha_cluster
from xnode.devtools.postgres import PgCluster, free_port
from xnode.store.primary import Database

GROUP = bytes([3]) * 16
POLL_S = 0.02
UNLIMITED = {"XNODE_LIMITS_ENABLED": "false"}  # one payer's rate limit is not measured here
FAULTS = {"kill": signal.SIGKILL, "stop": signal.SIGSTOP}


def leader_cluster(ha: HaCluster) -> PgCluster:
    leader = ha.leader()
    assert leader is not None
    member = ha.members[leader]
    return PgCluster(member.data_dir, member.pg_port)


async def publish_rate(address: str, seconds: float, callers: int, batch: int) -> float:
    async with NodeClient(address) as client:

        async def one() -> int:
            payloads = [os.urandom(64) for _ in range(batch)]  # a node stores each once
            return len(await client.publish_group_messages(PAYER, NODE, GROUP, payloads))

        return await run_callers(callers, seconds, one)


async def throughput(ha: HaCluster, work: Path, args: argparse.Namespace) -> None:
    cluster = leader_cluster(ha)
    key = SigningKey.generate()
    nodes = {}
    for name, commit in (("sync", "on"), ("local", "local")):
        database = f"bench_{name}"
        cluster.create_database(database)
        # Before the node connects: the setting holds for the database's new sessions.
        alter = f"ALTER DATABASE {database} SET synchronous_commit = {commit}"
        subprocess.run(["psql", cluster.dsn(), "-qc", alter], check=True)
        directory = work / name
        directory.mkdir()
        nodes[name] = await asyncio.to_thread(
            start_node_process, cluster, directory, key, database, UNLIMITED
        )
    print(f"throughput, env/s ({args.callers} callers, {args.seconds:g} s each, alternated)")
    try:
        for batch in (1, 100):
            for round_ in range(args.rounds):
                for name, (_, address) in nodes.items():
                    rate = await publish_rate(address, args.seconds, args.callers, batch)
                    standby = "waits for the standby" if name == "sync" else "primary only"
                    print(f"  batch {batch:3} round {round_ + 1} {standby:22} {rate:9,.0f}")
    finally:
        for proc, _ in nodes.values():
            proc.terminate()
            proc.wait(30)


def answers_primary(member: Member) -> bool:
    try:
        with urllib.request.urlopen(f"{member.rest}/primary", timeout=1.0):
            return True
    except OSError:
        return False


async def first_seen(probe: Callable[[], Awaitable[bool]], deadline: float) -> float | None:
    """Monotonic time `probe()` first returned true, polling until `deadline`."""
    while time.monotonic() < deadline:
        if await probe():
            return time.monotonic()
        await asyncio.sleep(POLL_S)
    return None


async def failover(ha: HaCluster, work: Path, fault: str, round_: int) -> None:
    cluster = leader_cluster(ha)
    key = SigningKey.generate()
    name = f"bench_failover_{fault}_{round_}"
    directory = work / name
    directory.mkdir()
    on_every_host = {
        **UNLIMITED,
        "XNODE_DATABASE_DSN": ha.dsn(name),
        "XNODE_DATABASE_PRIMARY_CHECK_SECONDS": "0.2",
    }
    proc, address = await asyncio.to_thread(
        start_node_process, cluster, directory, key, name, on_every_host
    )
    answered: list[float] = []
    stop = asyncio.Event()

    async def publisher() -> None:
        async with NodeClient(address) as client:
            while not stop.is_set():
                try:
                    await client.publish_group_messages(PAYER, NODE, GROUP, [os.urandom(16)])
                    answered.append(time.monotonic())
                except grpc.aio.AioRpcError:
                    await asyncio.sleep(POLL_S)

    old = ha.leader()
    assert old is not None
    new = next(n for n in ha.members if n != old)
    finder = Database(ha.dsn(name))  # the node's connect timeout
    await finder.find()
    tasks = [asyncio.create_task(publisher()) for _ in range(8)]
    try:
        while len(answered) < 100:
            await asyncio.sleep(POLL_S)
        killed = time.monotonic()
        ha.signal_member(old, FAULTS[fault])
        deadline = killed + 60

        async def rest_sees() -> bool:
            # The standby's own endpoint: HaCluster.leader would wait on a frozen member's.
            return await asyncio.to_thread(answers_primary, ha.members[new])

        async def finder_sees() -> bool:
            try:
                return await finder.find() == list(ha.members).index(new)
            except OSError:
                return False

        rest_at, dsn_at = await asyncio.gather(
            first_seen(rest_sees, deadline), first_seen(finder_sees, deadline)
        )
        promoted = min(t for t in (rest_at, dsn_at) if t is not None)

        async def served() -> bool:
            return any(t > promoted for t in answered)

        served_at = await first_seen(served, deadline)
        assert served_at is not None and rest_at is not None and dsn_at is not None
        print(
            f"  {fault} round {round_ + 1}: fault -> promotion seen {promoted - killed:5.2f} s;"
            f" REST /primary {rest_at - killed:5.2f} s, multi-host DSN {dsn_at - killed:5.2f} s;"
            f" node answers {served_at - promoted:5.2f} s after the promotion"
        )
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        proc.terminate()
        proc.wait(30)
    if fault == "kill":
        ha.start_member(old)
    else:
        ha.signal_member(old, signal.SIGCONT)
    await asyncio.to_thread(ha.wait_ready)


async def replayed(ha: HaCluster, standby: str, database: str) -> None:
    """Waits until the standby has replayed everything the primary wrote so far."""
    leader = ha.leader()
    assert leader is not None
    primary = await asyncpg.connect(ha.member_dsn(leader, database))
    replica = await asyncpg.connect(ha.member_dsn(standby, database))
    try:
        written = await primary.fetchval("SELECT pg_current_wal_lsn()")
        sql = "SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn"
        while not await replica.fetchval(sql, written):
            await asyncio.sleep(POLL_S)
    finally:
        await primary.close()
        await replica.close()


def replica_reads(metrics: str) -> float:
    """xnode_reads_routed_total{to="replica"} of the node whose metrics are at `metrics`."""
    with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    lines = [x for x in text.splitlines() if x.startswith("xnode_reads_routed_total{")]
    return sum(float(x.split()[-1]) for x in lines if 'to="replica"' in x)


async def reads(ha: HaCluster, work: Path, args: argparse.Namespace) -> None:
    cluster = leader_cluster(ha)
    leader = ha.leader()
    standby = next(m for m in ha.members if m != leader)
    nodes = {}
    for name in ("replica", "primary"):
        database = f"bench_reads_{name}"
        directory = work / database
        directory.mkdir()
        metrics = f"127.0.0.1:{free_port()}"
        extra = {**UNLIMITED, "XNODE_METRICS_ADDRESS": metrics}
        if name == "replica":
            extra["XNODE_DATABASE_REPLICA_DSN"] = ha.member_dsn(standby, database)
        key = SigningKey.generate()
        proc, address = await asyncio.to_thread(
            start_node_process, cluster, directory, key, database, extra
        )
        nodes[name] = (proc, address, metrics)
        await load_stored(cluster.dsn(database), key, args.stored, args.stored // 1000)
        await replayed(ha, standby, database)
    print(
        f"query 100 of one topic, {args.stored:,} stored per database, {args.queries} queries"
        " each, alternated: p50 / p99 ms"
    )
    try:
        for _, address, _ in nodes.values():  # both caches warm, as in a steady state
            await query_latency(address, args.stored // 1000, args.queries)
        for round_ in range(args.rounds):
            turn = list(nodes.items())[:: -1 if round_ % 2 else 1]  # neither always first
            for name, (_, address, _) in turn:
                lat = await query_latency(address, args.stored // 1000, args.queries)
                p50, p99 = percentile(lat, 50) * 1e3, percentile(lat, 99) * 1e3
                print(f"  round {round_ + 1} reads the {name:7} {p50:6.2f} / {p99:6.2f}")
        served = await asyncio.to_thread(replica_reads, nodes["replica"][2])
        assert served >= (args.rounds + 1) * args.queries, f"the replica served {served} queries"
    finally:
        for proc, _, _ in nodes.values():
            proc.terminate()
            proc.wait(30)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--callers", type=int, default=32)
    parser.add_argument("--stored", type=int, default=50_000, help="envelopes per database")
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--parts", default="throughput,failover,reads")
    parser.add_argument("--faults", default="kill,stop", help=f"of {', '.join(FAULTS)}")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    work = Path(tempfile.mkdtemp(prefix="xnode-bench-ha-"))
    work.chmod(0o755)
    ha = await asyncio.to_thread(start_ha_cluster, work / "ha")
    try:
        if "throughput" in parts:
            await throughput(ha, work, args)
        if "reads" in parts:
            await reads(ha, work, args)
        if "failover" in parts:
            print("failover (the primary's Patroni and Postgres killed or frozen)")
            for fault in args.faults.split(","):
                for round_ in range(args.rounds):
                    await failover(ha, work, fault, round_)
    finally:
        ha.stop()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
