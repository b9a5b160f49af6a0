"""Replication benchmarks: two `xnode run` processes on one Postgres cluster, static registry.

    .venv/bin/python bench/bench_replication.py [--rate 500] [--seconds 20] [--envelopes 1000000]
        [--work DIR]   # keeps the generated 1M-envelope database between runs

1. Ceiling: coincurve's public-key recovery rate, one thread and two. Every replicated
   envelope costs two recoveries (originator and payer signature), so half of it is the
   most envelopes/s verification allows.
2. Latency: publishes to node A at `--rate` envelopes/s (one envelope per request, sent on a
   fixed schedule whatever the answers do), each timed from the request to its arrival at a
   subscriber on node B (replicated: A -> stream -> verify -> store -> B's fan-out), and,
   for reference, at a subscriber on A itself; also how long A took to answer, and the part
   from A's originator timestamp to the arrival (the replication hop, for B).
3. Catch-up: node A holds `--envelopes` envelopes (generated with real signatures, then
   COPYed in); node B starts on an empty database and is timed until it has stored and
   verified them all.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_node import ENVELOPE_COLUMNS

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.client.node import NodeClient, envelopes_of, group_message_envelope
from xnode.core.crypto import SigningKey, keccak256, recover_public_key
from xnode.core.envelopes import build_payer_envelope, originate, validate_payer_envelope
from xnode.core.registry import NodeEntry, Registry
from xnode.devtools.devnet import wait_serving
from xnode.devtools.postgres import PgCluster, free_port, start_cluster
from xnode.store.migrate import upgrade_to_head

A, B = 100, 200
GROUP = bytes(range(16))
TOPIC = b"\x00" + GROUP
PAYLOAD_BYTES = 256


# --- ceiling --------------------------------------------------------------------------------


def _recover_many(items: list[tuple[bytes, bytes]]) -> int:
    for signature, digest in items:
        recover_public_key(signature, digest)
    return len(items)


def recovery_rate(threads: int, count: int = 40_000) -> float:
    key = SigningKey.generate()
    digests = [keccak256(i.to_bytes(8, "big")) for i in range(count)]
    items = [(key.sign(d), d) for d in digests]
    chunks = [items[i : i + 1000] for i in range(0, count, 1000)]
    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        done = sum(pool.map(_recover_many, chunks))
    return done / (time.perf_counter() - started)


# --- nodes ----------------------------------------------------------------------------------


class Nodes:
    def __init__(self, work: Path, cluster: PgCluster, keys: dict[int, SigningKey]) -> None:
        self.work = work
        self.cluster = cluster
        self.keys = keys
        self.addresses = {n: f"127.0.0.1:{free_port()}" for n in keys}
        self.registry = work / "nodes.json"
        self.registry.write_text(
            Registry(
                NodeEntry(n, k.public_key, f"http://{self.addresses[n]}") for n, k in keys.items()
            ).to_json()
        )
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    def start(self, node_id: int, database: str, extra: dict[str, str] | None = None) -> None:
        """`extra`: more XNODE_* settings for this node."""
        env = {
            **os.environ,
            "XNODE_LISTEN_ADDRESS": self.addresses[node_id],
            "XNODE_DATABASE_DSN": self.cluster.dsn(database),
            "XNODE_SIGNER_KEY": self.keys[node_id].hex(),
            "XNODE_NODES_FILE": str(self.registry),
            "XNODE_METRICS_ADDRESS": "",
            "XNODE_LOG_LEVEL": "error",
            "XNODE_WORKERS": "1",  # one process: its CPU is what /proc of the pid says
            **(extra or {}),
        }
        log = (self.work / f"node-{node_id}.log").open("ab")
        self.processes[node_id] = subprocess.Popen(
            [sys.executable, "-m", "xnode.cli", "run"], env=env, stdout=log, stderr=log
        )
        if not wait_serving(self.addresses[node_id], 120):
            raise RuntimeError(f"node {node_id} did not start; see {self.work}")

    def cpu_seconds(self, node_id: int) -> float:
        fields = Path(f"/proc/{self.processes[node_id].pid}/stat").read_text().split()
        return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        for proc in self.processes.values():
            proc.terminate()
        for node_id, proc in self.processes.items():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                print(f"node {node_id} did not stop within 30 s of SIGTERM; killed it")
                proc.kill()
                proc.wait()
        self.processes.clear()


def fresh_database(cluster: PgCluster, name: str) -> str:
    subprocess.run(["psql", cluster.dsn(), "-qc", f'DROP DATABASE IF EXISTS "{name}"'], check=True)
    cluster.create_database(name)
    upgrade_to_head(cluster.dsn(name))
    return name


# --- latency --------------------------------------------------------------------------------


def _index_of(raw: bytes) -> tuple[int, int]:
    """(the payload's index, the originator's timestamp in ns)."""
    outer = envelopes_pb2.OriginatorEnvelope.FromString(raw)
    unsigned = envelopes_pb2.UnsignedOriginatorEnvelope.FromString(
        outer.unsigned_originator_envelope
    )
    payer = envelopes_pb2.PayerEnvelope.FromString(unsigned.payer_envelope_bytes)
    client = envelopes_pb2.ClientEnvelope.FromString(payer.unsigned_client_envelope)
    return int(client.group_message.v1.data[:12]), unsigned.originator_ns


# Arrival times: perf_counter for latency, and time_ns to compare with the originator's stamp.
Arrivals = dict[int, tuple[float, int, int]]


async def _collect(address: str, arrivals: Arrivals, ready: asyncio.Event) -> None:
    async with NodeClient(address) as client:
        call = client.subscribe(topics=[TOPIC])
        ready.set()
        async for envelope in envelopes_of(call):
            index, stamped_ns = _index_of(envelope.SerializeToString())
            arrivals.setdefault(index, (time.perf_counter(), time.time_ns(), stamped_ns))


def _percentiles(samples: list[float]) -> tuple[float, float, float]:
    cuts = statistics.quantiles(samples, n=100)
    return statistics.median(samples), cuts[98], max(samples)


async def latency(nodes: Nodes, rate: float, seconds: float) -> None:
    payer = SigningKey.generate()
    count = int(rate * seconds)
    envelopes = [
        build_payer_envelope(
            group_message_envelope(GROUP, b"%012d" % i + os.urandom(PAYLOAD_BYTES - 12)), payer, A
        )
        for i in range(count)
    ]
    at_a: Arrivals = {}
    at_b: Arrivals = {}
    ready_a, ready_b = asyncio.Event(), asyncio.Event()
    readers = [
        asyncio.create_task(_collect(nodes.addresses[A], at_a, ready_a)),
        asyncio.create_task(_collect(nodes.addresses[B], at_b, ready_b)),
    ]
    await ready_a.wait()
    await ready_b.wait()
    await asyncio.sleep(1.0)
    sent: dict[int, float] = {}
    answered: dict[int, float] = {}
    async with NodeClient(nodes.addresses[A]) as client:

        async def publish(i: int) -> None:
            sent[i] = time.perf_counter()
            await client.publish([envelopes[i]])
            answered[i] = time.perf_counter()

        started = time.perf_counter()
        tasks = []
        for i in range(count):
            delay = started + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(publish(i)))
        await asyncio.gather(*tasks)
        achieved = count / (time.perf_counter() - started)
    for _ in range(300):  # the last ones arrive within 30 s, or count as missing
        if len(at_b) >= count:
            break
        await asyncio.sleep(0.1)
    for task in readers:
        task.cancel()
    warm = int(rate)  # the first second warms connections and caches up
    rpc = [(answered[i] - sent[i]) * 1000 for i in range(warm, count)]
    r50, r99, rmax = _percentiles(rpc)
    print(f"publish to A answered: p50={r50:.1f} ms p99={r99:.1f} ms max={rmax:.1f} ms")
    for name, arrivals in (("replicated, subscriber on B", at_b), ("local, subscriber on A", at_a)):
        kept = [i for i in range(warm, count) if i in arrivals]
        lat = [(arrivals[i][0] - sent[i]) * 1000 for i in kept]
        # From A's sequencing (its originator timestamp) to the arrival: the part after the
        # publish's group commit.
        after = [(arrivals[i][1] - arrivals[i][2]) / 1e6 for i in kept]
        p50, p99, worst = _percentiles(lat)
        a50, a99, _ = _percentiles(after)
        print(
            f"latency {name}: n={len(lat)} p50={p50:.1f} ms p99={p99:.1f} ms max={worst:.1f} ms"
            f" (missing {count - warm - len(lat)}; publish rate {achieved:.0f}/s);"
            f" from A's timestamp: p50={a50:.1f} ms p99={a99:.1f} ms"
        )


# --- catch-up -------------------------------------------------------------------------------


# An originator_envelopes row: node, sequence id, time, topic, expiry, payer address, envelope.
EnvelopeRow = tuple[int, int, int, bytes, int, bytes | None, bytes]


def _generate(args: tuple[str, int, int, int]) -> list[EnvelopeRow]:
    key_hex, first, count, base_ns = args
    key, payer = SigningKey.from_hex(key_hex), SigningKey.generate()
    rows = []
    for seq in range(first, first + count):
        client = group_message_envelope(GROUP, b"%012d" % seq + os.urandom(PAYLOAD_BYTES - 12))
        valid = validate_payer_envelope(build_payer_envelope(client, payer, A), A)
        env = originate(valid, A, seq, base_ns + seq, key)
        rows.append((A, seq, env.originator_ns, env.topic, env.expiry, env.payer_address, env.raw))
    return rows


async def populate(dsn: str, key: SigningKey, total: int) -> None:
    conn = await asyncpg.connect(dsn)
    have = await conn.fetchval("SELECT count(*) FROM originator_envelopes")
    if have == total:
        print(f"catch-up: reusing {total:,} envelopes in {dsn}")
        await conn.close()
        return
    await conn.execute("TRUNCATE originator_envelopes; DELETE FROM vector_clock")
    started, base_ns, chunk = time.perf_counter(), time.time_ns(), 10_000
    jobs = [(key.hex(), s, min(chunk, total - s + 1), base_ns) for s in range(1, total + 1, chunk)]
    with multiprocessing.Pool(os.cpu_count()) as pool:
        for rows in pool.imap(_generate, jobs):
            await conn.copy_records_to_table(
                "originator_envelopes", records=rows, columns=ENVELOPE_COLUMNS
            )
    await conn.execute(
        "INSERT INTO vector_clock (originator_node_id, sequence_id, last_ns) VALUES ($1, $2, $3)",
        A,
        total,
        base_ns + total,
    )
    await conn.execute("VACUUM ANALYZE originator_envelopes")
    await conn.close()
    print(
        f"catch-up: generated {total:,} signed envelopes in {time.perf_counter() - started:.0f} s"
    )


async def stored_count(dsn: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM originator_envelopes") or 0)
    finally:
        await conn.close()


async def vector_clock_of(dsn: str, node_id: int) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        value = await conn.fetchval(
            "SELECT sequence_id FROM vector_clock WHERE originator_node_id = $1", node_id
        )
        return int(value or 0)
    finally:
        await conn.close()


async def catch_up(nodes: Nodes, total: int) -> None:
    cluster = nodes.cluster
    source = "bench_source"
    conn = await asyncpg.connect(cluster.dsn())
    exists = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", source)
    await conn.close()
    if not exists:
        await asyncio.to_thread(fresh_database, cluster, source)
    await populate(cluster.dsn(source), nodes.keys[A], total)
    nodes.start(A, source)
    target = await asyncio.to_thread(fresh_database, cluster, "bench_target")
    dsn = cluster.dsn(target)
    started = time.perf_counter()
    nodes.start(B, target)
    cpu = {n: nodes.cpu_seconds(n) for n in (A, B)}
    samples = []
    while (have := await vector_clock_of(dsn, A)) < total:
        samples.append((time.perf_counter() - started, have))
        await asyncio.sleep(0.5)
    elapsed = time.perf_counter() - started
    used = {n: nodes.cpu_seconds(n) - cpu[n] for n in (A, B)}
    assert await stored_count(dsn) == total
    nodes.stop()
    steady = [s for s in samples if s[0] > 2.0]
    rate_mid = (
        (steady[-1][1] - steady[0][1]) / (steady[-1][0] - steady[0][0]) if len(steady) > 2 else 0
    )
    print(
        f"catch-up: {total:,} envelopes in {elapsed:.1f} s = {total / elapsed:,.0f} envelopes/s"
        f" (steady state {rate_mid:,.0f}/s; from B's start, every signature verified);"
        f" CPU: node B {used[B]:.0f} s ({used[B] / total * 1e6:.0f} us/envelope),"
        f" node A {used[A]:.0f} s"
    )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--envelopes", type=int, default=1_000_000)
    parser.add_argument("--work", help="keep Postgres (and the generated data) here")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--skip-catch-up", action="store_true")
    args = parser.parse_args()
    one, two = recovery_rate(1), recovery_rate(2)
    print(
        f"ceiling: key recovery {one:,.0f}/s on one thread, {two:,.0f}/s on two"
        f" -> at most {one / 2:,.0f} / {two / 2:,.0f} envelopes/s (2 recoveries each)"
    )
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="xnode-repl-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    work.chmod(0o755)
    cluster = start_cluster(work / "pg")  # fsync on: an answer means durable, as in production
    keys_file = work / "keys"
    if keys_file.exists():
        hexes = keys_file.read_text().split()
    else:
        hexes = [SigningKey.generate().hex() for _ in (A, B)]
        keys_file.write_text("\n".join(hexes))
    nodes = Nodes(
        work, cluster, {A: SigningKey.from_hex(hexes[0]), B: SigningKey.from_hex(hexes[1])}
    )
    try:
        if not args.skip_latency:
            nodes.start(A, await asyncio.to_thread(fresh_database, cluster, "bench_a"))
            nodes.start(B, await asyncio.to_thread(fresh_database, cluster, "bench_b"))
            await latency(nodes, args.rate, args.seconds)
            nodes.stop()
        if not args.skip_catch_up:
            await catch_up(nodes, args.envelopes)
    finally:
        nodes.stop()
        cluster.stop()
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    import uvloop  # as `xnode run` uses: the client side must not be the slow part

    uvloop.run(main())
