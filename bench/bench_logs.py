"""Committed-logs benchmark: publish throughput with committed logs (leaves, tree
nodes, checkpoints) on vs off, and inclusion-proof latency over a log of 1M leaves, each
printed beside its bound; then `Sequencer.append` alone in both modes (the
logs' own CPU per envelope, in the signing process and in Postgres, with less noise than
a node's figure: shared cores move a node round's CPU per envelope by +-10 us).

    .venv/bin/python bench/bench_logs.py [--seconds 10] [--rounds 2] [--leaves 1000000]

"Off" is this tree with `XNODE_LOG_COMMIT_ENABLED=false` (the node signs and stores the same
envelopes, but no leaf hashes, tree nodes, tree size or checkpoints); "on" is this tree with
default settings. Rounds alternate off/on (off first in even rounds, on first in odd ones)
on one Postgres cluster (fsync on), a fresh database each. Inclusion proofs are measured at
the database + use case level (`LogQueries.inclusion` over `LogStore`, one pool, no gRPC):
the tree is loaded with COPY, then proofs for random sequence ids are asked against the
checkpoint.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import cast

import asyncpg
from bench_node import (
    NODE,
    payer_envelopes,
    percentile,
    publish_batches,
    publish_singles,
    row,
)

from xnode.core import merkle
from xnode.core.checkpoints import check_inclusion, sign_checkpoint
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import validate_payer_envelope
from xnode.core.reconciliation import fingerprint_part
from xnode.core.registry import NodeEntry, Registry
from xnode.devtools.devnet import wait_serving
from xnode.devtools.postgres import PgCluster, free_port, start_cluster
from xnode.store.identity import claim_database
from xnode.store.logs import LogStore
from xnode.store.migrate import upgrade_to_head
from xnode.store.sequencer import Sequencer
from xnode.usecases.logs import LogQueries

ROOT = Path(__file__).resolve().parents[1]


def start_node(
    cluster: PgCluster,
    work: Path,
    key: SigningKey,
    name: str,
    logs: bool,
    extra_env: dict[str, str] | None = None,
) -> tuple[subprocess.Popen[bytes], str]:
    """`extra_env`: more settings (bench_proofs.py turns topic commitments off)."""
    cluster.create_database(name)
    nodes = work / "nodes.json"
    nodes.write_text(Registry([NodeEntry(NODE, key.public_key, "")]).to_json())
    address = f"127.0.0.1:{free_port()}"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "src"),
        "XNODE_LISTEN_ADDRESS": address,
        "XNODE_DATABASE_DSN": cluster.dsn(name),
        "XNODE_SIGNER_KEY": key.hex(),
        "XNODE_NODES_FILE": str(nodes),
        "XNODE_METRICS_ADDRESS": "",
        "XNODE_LOG_LEVEL": "warning",
        # One payer publishing flat out: the cost measured is the logs', not the API limits'
        # (on by default).
        "XNODE_LIMITS_ENABLED": "false",
        "XNODE_LOG_COMMIT_ENABLED": str(logs).lower(),
        # One serving process: the CPU counted is this pid's (workers would be its children).
        "XNODE_WORKERS": "1",
        **(extra_env or {}),
    }
    proc = subprocess.Popen([sys.executable, "-m", "xnode.cli", "run"], env=env)
    if not wait_serving(address, 120):
        proc.kill()
        raise SystemExit(f"node {name} did not start")
    return proc, address


def cpu_seconds(pid: int, with_children: bool = False) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    if with_children:
        ticks += int(fields[13]) + int(fields[14])  # of children it has reaped
    return ticks / os.sysconf("SC_CLK_TCK")


def postgres_cpu(cluster: PgCluster) -> float:
    """The cluster's CPU time so far: the postmaster, its live backends and reaped ones."""
    postmaster = int((cluster.data_dir / "postmaster.pid").read_text().split()[0])
    total = cpu_seconds(postmaster, with_children=True)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
                if int(fields[1]) == postmaster:
                    total += cpu_seconds(int(entry.name))
            except (OSError, IndexError):
                continue  # it ended meanwhile
    return total


@dataclass
class Measured:
    rate: float  # envelopes per second, wall clock
    cpu_us: float  # node + Postgres CPU microseconds per envelope (robust on shared cores)
    node_us: float  # of which the node's
    # Postgres checkpoints and autovacuum runs in the window: work the CPU figure includes
    background: str = ""


async def measure(
    cluster: PgCluster, name: str, node_pid: int, run: Callable[[], Awaitable[float]]
) -> Measured:
    conn = await asyncpg.connect(cluster.dsn(name))
    try:
        count = "SELECT coalesce(max(sequence_id), 0) FROM vector_clock"
        before = await conn.fetchval(count), cpu_seconds(node_pid), postgres_cpu(cluster)
        chores = await background_work(conn)
        rate = await run()
        chores = [b - a for a, b in zip(chores, await background_work(conn), strict=True)]
        after = await conn.fetchval(count), cpu_seconds(node_pid), postgres_cpu(cluster)
    finally:
        await conn.close()
    envelopes = max(1, after[0] - before[0])
    cpu = (after[1] - before[1]) + (after[2] - before[2])
    node = (after[1] - before[1]) / envelopes * 1e6
    chores_text = "pg checkpoints {}, autovacuums {}".format(*chores)
    return Measured(rate, cpu / envelopes * 1e6, node, chores_text)


async def background_work(conn: asyncpg.Connection) -> list[int]:
    """Postgres checkpoints so far (cluster-wide) and autovacuum/autoanalyze runs (this
    database): an outlier round's CPU may be theirs."""
    row = await conn.fetchrow(
        "SELECT (SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter),"
        " (SELECT coalesce(sum(autovacuum_count + autoanalyze_count), 0)::bigint"
        "  FROM pg_stat_all_tables)"
    )
    assert row is not None
    await conn.execute("SELECT pg_stat_clear_snapshot()")  # fresh counters next time
    return [int(row[0]), int(row[1])]


async def publish_round(
    cluster: PgCluster, work: Path, name: str, logs: bool, seconds: float
) -> tuple[Measured, Measured, int, int]:
    """Batches then singles on a fresh node; also the checkpoints it issued and the leaves
    it stored (none when off)."""
    key = SigningKey.generate()
    proc, address = await asyncio.to_thread(start_node, cluster, work, key, name, logs)
    try:
        batched = await measure(cluster, name, proc.pid, lambda: publish_batches(address, seconds))
        singles = await measure(cluster, name, proc.pid, lambda: publish_singles(address, seconds))
    finally:
        proc.terminate()
        proc.wait(30)
    conn = await asyncpg.connect(cluster.dsn(name))
    try:
        issued = await conn.fetchval("SELECT count(*) FROM log_checkpoints")
        leaves = await conn.fetchval("SELECT count(*) FROM log_leaves")
    finally:
        await conn.close()
    return batched, singles, issued, leaves


# --- the sequencer alone: where the logs' CPU goes ---------------------------------------------


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def sequencer_round(
    cluster: PgCluster, name: str, logs: bool, batches: int
) -> tuple[float, float]:
    """`Sequencer.append` of `batches` batches of 100 in this process, one connection: CPU per
    envelope of this process (signing, leaf hashes, tree nodes, driver) and of its Postgres
    backend. No gRPC, validation or fan-out, so far less noise than a node's figure."""
    cluster.create_database(name)
    await asyncio.to_thread(upgrade_to_head, cluster.dsn(name))
    key = SigningKey.generate()
    batch = [validate_payer_envelope(p, NODE) for p in payer_envelopes(100, b"\x05" * 16)]
    async with asyncpg.create_pool(cluster.dsn(name), min_size=1, max_size=1) as pool:
        await claim_database(pool, NODE, key.public_key)
        backend = await pool.fetchval("SELECT pg_backend_pid()")
        sequencer = Sequencer(pool, NODE, key, "bench", None, logs)
        await sequencer.prime()
        for _ in range(20):  # warm the statements
            await sequencer.append(batch, time.time_ns())
        before = own_cpu(), cpu_seconds(backend)
        for _ in range(batches):
            await sequencer.append(batch, time.time_ns())
        after = own_cpu(), cpu_seconds(backend)
    per = 1e6 / (batches * 100)
    return (after[0] - before[0]) * per, (after[1] - before[1]) * per


async def sequencer_alone(cluster: PgCluster, rounds: int, batches: int) -> dict[str, float]:
    """Median (sequencer process, backend) us/env per mode over ABBA rounds."""
    runs: dict[str, list[tuple[float, float]]] = {"off": [], "on": []}
    for r in range(rounds):
        for label in ("off", "on") if r % 2 == 0 else ("on", "off"):
            runs[label].append(
                await sequencer_round(cluster, f"seq_{label}{r}", label == "on", batches)
            )
    return {
        f"{label} {part}": median(x[i] for x in done)
        for label, done in runs.items()
        for i, part in enumerate(("process", "backend"))
    }


# --- inclusion proofs over 1M leaves ---------------------------------------------------------


def build_tree(
    n: int,
) -> tuple[list[tuple[int, int, bytes, int]], list[tuple[int, int, int, bytes]], bytes]:
    frontier = merkle.Frontier()
    leaves, nodes = [], []
    for i in range(n):
        leaf = merkle.leaf_hash(i.to_bytes(8, "big") + b"bench")
        leaves.append((NODE, i + 1, leaf, fingerprint_part(leaf)))
        nodes += [(NODE, lvl, idx, h) for lvl, idx, h in frontier.append(leaf) if lvl > 0]
    return leaves, nodes, frontier.root()


async def load_tree(dsn: str, n: int, key: SigningKey) -> float:
    started = time.perf_counter()
    leaves, nodes, root = await asyncio.to_thread(build_tree, n)
    conn = await asyncpg.connect(dsn)
    try:
        await conn.copy_records_to_table("log_leaves", records=leaves)
        await conn.copy_records_to_table(
            "log_nodes",
            records=nodes,
            columns=["originator_node_id", "level", "node_index", "hash"],
        )
        await conn.execute("INSERT INTO log_trees VALUES ($1, $2)", NODE, n)
        c = sign_checkpoint(key, NODE, n, root, time.time_ns(), None)
        await conn.execute(
            "INSERT INTO log_checkpoints (originator_node_id, tree_size, root, originator_ns,"
            " previous_hash, signed) VALUES ($1, $2, $3, $4, $5, $6)",
            NODE, n, c.root, c.originator_ns, c.previous_hash, c.signed,
        )  # fmt: skip
        await conn.execute("VACUUM ANALYZE log_leaves, log_nodes, log_checkpoints")
    finally:
        await conn.close()
    return time.perf_counter() - started


async def inclusion_latency(dsn: str, n: int, proofs: int) -> list[float]:
    async with asyncpg.create_pool(
        dsn, min_size=1, max_size=1, server_settings={"jit": "off"}
    ) as pool:
        queries = LogQueries(LogStore(pool), 1.0, 30.0)
        for _ in range(200):  # warm the connection's prepared statements and the cache
            await queries.inclusion(NODE, random.randint(1, n), 0)
        took = []
        for _ in range(proofs):
            sequence_id = random.randint(1, n)
            started = time.perf_counter()
            found = await queries.inclusion(NODE, sequence_id, 0)
            took.append(time.perf_counter() - started)
            assert found.checkpoint is not None
            check_inclusion(found.checkpoint, sequence_id, found.leaf, found.proof)
        return took


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--leaves", type=int, default=1_000_000)
    parser.add_argument("--proofs", type=int, default=5000)
    parser.add_argument("--sequencer-batches", type=int, default=300)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="xnode-bench-logs-"))
    work.chmod(0o755)
    cluster = start_cluster(work / "pg", fsync=True)
    try:
        print(f"machine: {os.cpu_count()} cores, load {load()}; off = log_commit_enabled false,")
        print(f"on = default settings; {args.seconds} s per measure, {args.rounds} rounds")
        results: dict[str, list[tuple[Measured, Measured, int, int]]] = {"off": [], "on": []}
        for r in range(args.rounds):
            modes = (("off", False), ("on", True))
            for label, logs in modes if r % 2 == 0 else modes[::-1]:  # ABBA: no order bias
                done = await publish_round(cluster, work, f"{label}{r}", logs, args.seconds)
                results[label].append(done)
                b, s, issued, leaves = done
                print(
                    f"  round {r} {label}: batches {b.rate:,.0f} env/s {b.cpu_us:.0f} us/env"
                    f" (node {b.node_us:.0f}),",
                    end="",
                )
                print(f" singles {s.rate:,.0f} env/s {s.cpu_us:.0f} us/env", end="")
                print(f" (node {s.node_us:.0f}),", end="")
                print(f" checkpoints {issued}, leaves {leaves:,}; load {load()}")
                print(f"    batches: {b.background}; singles: {s.background}")
        print("| measure | off | on | on / off | bound |\n|---|---|---|---|---|")
        names = ["publish, batches of 100, 8 callers", "publish, single envelopes, 64 callers"]
        for i, what in enumerate(names):
            off = [cast(Measured, x[i]) for x in results["off"]]
            on = [cast(Measured, x[i]) for x in results["on"]]
            off_rate, on_rate = median(m.rate for m in off), median(m.rate for m in on)
            row(f"{what}, env/s (median)", f"{off_rate:,.0f}", f"{on_rate:,.0f}",
                f"{on_rate / off_rate:.3f}", ">= 0.95")  # fmt: skip
            off_cpu, on_cpu = median(m.cpu_us for m in off), median(m.cpu_us for m in on)
            row(f"{what}, node + Postgres CPU us/env (median)", f"{off_cpu:.0f}",
                f"{on_cpu:.0f}", f"{off_cpu / on_cpu:.3f}", ">= 0.95 (as throughput)")  # fmt: skip

        seq = await sequencer_alone(cluster, max(4, args.rounds * 2), args.sequencer_batches)
        print(
            f"sequencer alone, batches of 100 ({args.sequencer_batches} per round); load {load()}"
        )
        print("| measure | off | on | on - off |\n|---|---|---|---|")
        for part in ("process", "backend"):
            off_us, on_us = seq[f"off {part}"], seq[f"on {part}"]
            print(f"| sequencer {part} CPU us/env (median) | {off_us:.1f} | {on_us:.1f} |"
                  f" {on_us - off_us:+.1f} |")  # fmt: skip
        cost = seq["on process"] + seq["on backend"] - seq["off process"] - seq["off backend"]
        node_off = median(x[0].cpu_us for x in results["off"])
        print(f"| the logs' sequencer cost / the node's batch CPU per envelope (off) |"
              f" {cost:.1f} / {node_off:.0f} us = {cost / node_off:.1%} | <= 5% |")  # fmt: skip

        cluster.create_database("proofs")
        await asyncio.to_thread(upgrade_to_head, cluster.dsn("proofs"))
        load_s = await load_tree(cluster.dsn("proofs"), args.leaves, SigningKey.generate())
        print(f"(built and loaded a tree of {args.leaves:,} leaves in {load_s:.1f} s)")
        took = await inclusion_latency(cluster.dsn("proofs"), args.leaves, args.proofs)
        p50, p99 = percentile(took, 50) * 1e3, percentile(took, 99) * 1e3
        print(f"load {load()}\n| measure | result | bound |\n|---|---|---|")
        print(f"| inclusion proof, {args.leaves:,} leaves, p50 | {p50:.3f} ms | |")
        print(f"| inclusion proof, {args.leaves:,} leaves, p99 | {p99:.3f} ms | <= 2 ms |")
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
