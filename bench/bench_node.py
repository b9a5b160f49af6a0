"""Node benchmark: publish throughput, delivery latency, query latency and memory,
each printed beside this machine's ceiling measured in the same run.

    .venv/bin/python bench/bench_node.py [--seconds 10] [--stored 1000000]

Starts its own Postgres cluster (fsync on: answers are durable) and an `xnode run` process.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import asyncpg
import grpc
import uvloop

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.client.node import NodeClient, group_message_envelope
from xnode.core.crypto import SigningKey, keccak256
from xnode.core.envelopes import build_payer_envelope, originate, validate_payer_envelope
from xnode.core.registry import NodeEntry, Registry
from xnode.devtools.devnet import wait_serving
from xnode.devtools.postgres import PgCluster, free_port, start_cluster
from xnode.store.migrate import upgrade_to_head

NODE = 100
PAYER = SigningKey.generate()


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


class Rss:
    """Samples a process's resident memory."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak_kb = pid, 0

    def sample(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                kb = int(line.split()[1])
                self.peak_kb = max(self.peak_kb, kb)
                return kb
        return 0

    async def watch(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self.sample()
            await asyncio.sleep(0.2)


# --- ceilings -------------------------------------------------------------------------------

EMPTY_SERVER = """
import asyncio, sys, grpc
async def main():
    server = grpc.aio.server()
    async def empty(request, context):
        return b""
    handler = grpc.unary_unary_rpc_method_handler(
        empty, request_deserializer=lambda b: b, response_serializer=lambda b: b)
    generic = grpc.method_handlers_generic_handler("bench.Empty", {"Call": handler})
    server.add_generic_rpc_handlers([generic])
    server.add_insecure_port(sys.argv[1])
    await server.start()
    print("ready", flush=True)
    await server.wait_for_termination()
asyncio.run(main())
"""


async def run_callers(callers: int, seconds: float, call: Callable[[], Awaitable[int]]) -> float:
    """Items per second done by `callers` concurrent loops of `call` (which returns items)."""
    done = 0
    deadline = time.perf_counter() + seconds

    async def loop() -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            items = await call()  # not `done += await ...`: that reads `done` before awaiting
            done += items

    started = time.perf_counter()
    await asyncio.gather(*(loop() for _ in range(callers)))
    return done / (time.perf_counter() - started)


async def empty_unary_ceiling(seconds: float) -> float:
    address = f"127.0.0.1:{free_port()}"
    proc = subprocess.Popen([sys.executable, "-c", EMPTY_SERVER, address], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            call = channel.unary_unary(
                "/bench.Empty/Call",
                request_serializer=lambda b: b,
                response_deserializer=lambda b: b,
            )

            async def one() -> int:
                await call(b"")
                return 1

            return await run_callers(64, seconds, one)
    finally:
        proc.kill()


def signing_ceiling(seconds: float = 2.0) -> float:
    key, digest, n = SigningKey.generate(), keccak256(b"x"), 0
    deadline = time.perf_counter() + seconds
    started = time.perf_counter()
    while time.perf_counter() < deadline:
        for _ in range(500):
            key.sign(digest)
        n += 500
    return n / (time.perf_counter() - started)


async def copy_ceiling(dsn: str, rows: int = 200_000) -> float:
    conn = await asyncpg.connect(dsn)
    await conn.execute(
        "CREATE TEMP TABLE copy_bench (a int, b bigint, c bigint, topic bytea, e bigint,"
        " payer bytea, envelope bytea)"
    )
    body = os.urandom(180)
    records = [(NODE, i, i, b"\x00" + body[:16], i, body[:20], body) for i in range(rows)]
    started = time.perf_counter()
    await conn.copy_records_to_table("copy_bench", records=records)
    rate = rows / (time.perf_counter() - started)
    await conn.close()
    return rate


# --- the node -------------------------------------------------------------------------------


def start_node_process(
    cluster: PgCluster,
    work: Path,
    key: SigningKey,
    database: str = "bench",
    extra: dict[str, str] | None = None,
    command: list[str] | None = None,
) -> tuple[subprocess.Popen[bytes], str]:
    """`command`: what runs the node (default `python -m xnode.cli run`)."""
    cluster.create_database(database)
    upgrade_to_head(cluster.dsn(database))
    nodes = work / "nodes.json"
    nodes.write_text(Registry([NodeEntry(NODE, key.public_key, "")]).to_json())
    address = f"127.0.0.1:{free_port()}"
    env = {
        **os.environ,
        "XNODE_LISTEN_ADDRESS": address,
        "XNODE_DATABASE_DSN": cluster.dsn(database),
        "XNODE_SIGNER_KEY": key.hex(),
        "XNODE_NODES_FILE": str(nodes),
        "XNODE_METRICS_ADDRESS": "",
        "XNODE_LOG_LEVEL": "warning",
        "XNODE_WORKERS": "1",  # one process: its CPU is what /proc of the pid says
        **(extra or {}),
    }
    proc = subprocess.Popen(command or [sys.executable, "-m", "xnode.cli", "run"], env=env)
    if not wait_serving(address):
        proc.kill()
        raise SystemExit("node did not start")
    return proc, address


def payer_envelopes(n: int, group: bytes) -> list[envelopes_pb2.PayerEnvelope]:
    return [
        build_payer_envelope(group_message_envelope(group, os.urandom(160)), PAYER, NODE)
        for _ in range(n)
    ]


async def publish_singles(address: str, seconds: float) -> float:
    envs = payer_envelopes(2000, b"\x01" * 16)
    async with NodeClient(address) as client:
        i = 0

        async def one() -> int:
            nonlocal i
            i += 1
            await client.publish([envs[i % len(envs)]])
            return 1

        return await run_callers(64, seconds, one)


async def publish_batches(address: str, seconds: float) -> float:
    batches = [payer_envelopes(100, bytes([2 + b]) * 16) for b in range(20)]
    async with NodeClient(address) as client:
        i = 0

        async def batch() -> int:
            nonlocal i
            i += 1
            await client.publish(batches[i % len(batches)])
            return 100

        return await run_callers(8, seconds, batch)


async def delivery_latency(address: str, rate: int, seconds: float) -> list[float]:
    group = b"\x77" * 16
    topic = b"\x00" + group
    envs = payer_envelopes(rate * int(seconds) + 10, group)
    sent_at: dict[bytes, float] = {}
    latencies: list[float] = []
    async with NodeClient(address) as publisher, NodeClient(address) as subscriber:
        call = subscriber.subscribe(topics=[topic])
        responses = call.__aiter__()
        await responses.__anext__()  # caught up: live from here on
        done = asyncio.Event()

        async def receive() -> None:
            async for response in responses:
                now = time.perf_counter()
                for env in response.envelopes:
                    from xnode.core.envelopes import parse_originator_envelope

                    key = parse_originator_envelope(
                        env.SerializeToString()
                    ).payer_envelope.unsigned_client_envelope
                    if key in sent_at:
                        latencies.append(now - sent_at.pop(key))
                if done.is_set() and not sent_at:
                    return

        receiver = asyncio.create_task(receive())
        interval, start = 1.0 / rate, time.perf_counter()
        tasks = []
        for i, env in enumerate(envs[: rate * int(seconds)]):
            target = start + i * interval
            delay = target - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            sent_at[env.unsigned_client_envelope] = time.perf_counter()
            tasks.append(asyncio.create_task(publisher.publish([env])))
        await asyncio.gather(*tasks)
        done.set()
        # Everything may already have arrived (then no later response wakes the receiver).
        deadline = time.perf_counter() + 30
        while sent_at and not receiver.done() and time.perf_counter() < deadline:
            await asyncio.sleep(0.01)
        receiver.cancel()
        call.cancel()
        if sent_at:
            raise SystemExit(f"{len(sent_at)} published envelopes never reached the subscriber")
    return latencies


# The bulk load's columns; later ones (fees) keep their defaults.
ENVELOPE_COLUMNS = (
    "originator_node_id",
    "originator_sequence_id",
    "originator_ns",
    "topic",
    "expiry_unixtime",
    "payer_address",
    "envelope",
)


def _sign_rows(
    args: tuple[bytes, int, int, int],
) -> list[tuple[int, int, int, bytes, int, bytes, bytes]]:
    secret, first, count, topics = args
    key = SigningKey(secret)
    payer = validate_payer_envelope(
        build_payer_envelope(group_message_envelope(b"\x10" * 16, os.urandom(160)), PAYER, NODE),
        NODE,
    )
    rows = []
    base_ns = time.time_ns()
    for seq in range(first, first + count):
        signed = originate(payer, NODE, seq, base_ns + seq, key)
        topic = b"\x00" + (seq % topics).to_bytes(16, "big")
        rows.append(
            (NODE, seq, signed.originator_ns, topic, signed.expiry, PAYER.address, signed.raw)
        )
    return rows


async def load_stored(dsn: str, key: SigningKey, total: int, topics: int) -> float:
    """Bulk-loads `total` signed envelopes spread over `topics` topics (after the node's own)."""
    conn = await asyncpg.connect(dsn)
    first = (
        await conn.fetchval(
            "SELECT sequence_id FROM vector_clock WHERE originator_node_id = $1", NODE
        )
    ) + 1
    chunk = 50_000
    jobs = [(key.secret, first + i, min(chunk, total - i), topics) for i in range(0, total, chunk)]
    started = time.perf_counter()
    with ProcessPoolExecutor(2) as pool:
        for rows in pool.map(_sign_rows, jobs):
            await conn.copy_records_to_table(
                "originator_envelopes", records=rows, columns=ENVELOPE_COLUMNS
            )
    await conn.execute(
        "UPDATE vector_clock SET sequence_id = $2, last_ns = $3 WHERE originator_node_id = $1",
        NODE,
        first + total - 1,
        time.time_ns() + total,
    )
    # Settle the bulk load (visibility map, statistics, dirty pages) so the query numbers are
    # the steady state, not autovacuum and checkpoint catching up.
    await conn.execute("VACUUM (ANALYZE) originator_envelopes")
    await conn.execute("CHECKPOINT")
    await conn.close()
    return time.perf_counter() - started


async def query_latency(address: str, topics: int, queries: int) -> list[float]:
    latencies = []
    async with NodeClient(address) as client:
        for _ in range(queries):
            topic = b"\x00" + random.randrange(topics).to_bytes(16, "big")
            started = time.perf_counter()
            found = await client.query(topics=[topic], limit=100)
            latencies.append(time.perf_counter() - started)
            assert len(found) == 100, len(found)
    return latencies


def row(name: str, value: str, ceiling: str = "", ratio: str = "", target: str = "") -> None:
    print(f"| {name} | {value} | {ceiling} | {ratio} | {target} |", flush=True)


# Limits checked on every publish but never reached: what the checks cost, not refusals.
_LIMITS = {
    "off": {"XNODE_LIMITS_ENABLED": "false"},
    "on": {
        "XNODE_LIMITS_ENABLED": "true",
        **{
            f"XNODE_LIMIT_PUBLISH_{what}_PER_SECOND": "1e12"
            for what in ("ENVELOPES", "BYTES", "IP_ENVELOPES", "IP_BYTES")
        },
    },
}


async def limits_overhead(cluster: PgCluster, work: Path, seconds: float, rounds: int) -> None:
    """Publish throughput with the API limits on and off: two node processes, one database
    each, measured alternately in the same run (so drift and neighbours hit both alike)."""
    key = SigningKey.generate()
    procs = {}
    for mode, extra in _LIMITS.items():
        procs[mode] = await asyncio.to_thread(
            start_node_process, cluster, work, key, f"limits_{mode}", extra
        )
    results: dict[tuple[str, str], list[float]] = {}
    try:
        for _ in range(rounds):
            for mode, (_, address) in procs.items():
                singles = await publish_singles(address, seconds)
                batched = await publish_batches(address, seconds)
                results.setdefault((mode, "singles"), []).append(singles)
                results.setdefault((mode, "batches"), []).append(batched)
    finally:
        for proc, _ in procs.values():
            proc.terminate()
            proc.wait(30)
    print("| publish | limits off | limits on | cost |\n|---|---|---|---|")
    for shape, label in (
        ("singles", "single envelopes, 64 callers"),
        ("batches", "batches of 100, 8 callers"),
    ):
        off = sum(results[("off", shape)]) / rounds
        on = sum(results[("on", shape)]) / rounds
        print(f"| {label} | {off:,.0f} env/s | {on:,.0f} env/s | {(off - on) / off:+.1%} |")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--stored", type=int, default=1_000_000)
    parser.add_argument(
        "--limits", action="store_true", help="only publish with the API limits on and off"
    )
    parser.add_argument("--rounds", type=int, default=3, help="alternations for --limits")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="xnode-bench-"))
    work.chmod(0o755)
    cluster = start_cluster(work / "pg", fsync=True)
    if args.limits:
        try:
            await limits_overhead(cluster, work, args.seconds, args.rounds)
        finally:
            cluster.stop()
            shutil.rmtree(work, ignore_errors=True)
        return
    key = SigningKey.generate()
    # The API limits (on by default) would refuse the bench's one payer
    # publishing flat out: this measures the node, the limits have their own run (--limits).
    proc, address = await asyncio.to_thread(
        start_node_process, cluster, work, key, "bench", {"XNODE_LIMITS_ENABLED": "false"}
    )
    rss = Rss(proc.pid)
    stop = asyncio.Event()
    watcher = asyncio.create_task(rss.watch(stop))
    try:
        unary = await empty_unary_ceiling(args.seconds / 2)
        sign = signing_ceiling()
        copy = await copy_ceiling(cluster.dsn("bench"))
        print(
            f"machine: {os.cpu_count()} cores; node pid {proc.pid}; seconds per run {args.seconds}"
        )
        print("| measure | result | ceiling | ratio | target |\n|---|---|---|---|---|")
        row("empty grpc.aio unary call, 64 callers", f"{unary:,.0f} calls/s")
        row("coincurve sign, one core", f"{sign:,.0f} sigs/s")
        row("asyncpg COPY, envelope rows", f"{copy:,.0f} rows/s")
        singles = await publish_singles(address, args.seconds)
        row(
            "publish, single envelopes, 64 callers",
            f"{singles:,.0f} env/s",
            f"{unary:,.0f}",
            f"{singles / unary:.2f}",
            ">= 3,000 env/s",
        )
        batched = await publish_batches(address, args.seconds)
        row(
            "publish, batches of 100, 8 callers",
            f"{batched:,.0f} env/s",
            f"{sign:,.0f}",
            f"{batched / sign:.2f}",
            ">= 20,000 env/s",
        )
        lat = await delivery_latency(address, 500, args.seconds)
        p50, p99 = percentile(lat, 50) * 1e3, percentile(lat, 99) * 1e3
        row("publish -> subscriber at 500 env/s, p50", f"{p50:.2f} ms", "", "", "<= 5 ms")
        row("publish -> subscriber at 500 env/s, p99", f"{p99:.2f} ms", "", "", "<= 20 ms")
        topics = max(1, args.stored // 100)
        load_s = await load_stored(cluster.dsn("bench"), key, args.stored, topics)
        print(f"(loaded {args.stored:,} signed envelopes over {topics:,} topics in {load_s:.1f} s)")
        q = await query_latency(address, topics, 2000)
        row(
            f"query 100 of one topic, {args.stored:,} stored, p50",
            f"{percentile(q, 50) * 1e3:.2f} ms",
        )
        row(
            f"query 100 of one topic, {args.stored:,} stored, p99",
            f"{percentile(q, 99) * 1e3:.2f} ms",
            "",
            "",
            "<= 5 ms",
        )
        rss.sample()
        row(
            "node resident memory, peak over the run",
            f"{rss.peak_kb / 1024:.0f} MB",
            "",
            "",
            "<= 250 MB",
        )
    finally:
        stop.set()
        await watcher
        proc.terminate()
        proc.wait(30)
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    uvloop.run(main())  # the load generator costs less CPU on uvloop, as the node does
