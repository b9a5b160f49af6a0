"""Worker processes under honest load: pre-built gRPC requests sent to `xnode run --workers N`
for N = 1, 2; every figure is printed beside its ceiling from the same run. Empty calls come
from `h2load` (Debian's nghttp2-client, one C thread), which posts one body over and over;
publishes from bench/grpc_bodies_load.mjs (Node's http2, one process), which sends each of a
file's bodies once: every publish carries payer envelopes of its own (a node answers a payer
envelope it stored already from the store, storing nothing, so a repeated body would measure
that). The loader's own CPU per request is printed: it shares the machine's cores.

    .venv/bin/python bench/bench_cores.py [--workers 1,2] [--singles 20000] [--batches 400]
        [--lone 2000]

Each publish run prints every worker's share of a core.

After every publish run the node's stored envelopes are counted: the run fails unless
exactly as many were stored as were sent (and every grpc-status was OK). Starts its own
Postgres cluster (fsync on: answers are durable).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xnode.client.node import group_message_envelope
from xnode.core.crypto import SigningKey, keccak256
from xnode.core.envelopes import build_payer_envelope
from xnode.core.registry import NodeEntry, Registry
from xnode.devtools.devnet import wait_serving
from xnode.devtools.postgres import PgCluster, free_port, start_cluster
from xnode.devtools.processes import child_pids, descendant_pids
from xnode.store.migrate import upgrade_to_head

NODE = 100
PAYER = SigningKey.generate()
PUBLISH = "/xmtp.xmtpv4.message_api.ReplicationApi/PublishPayerEnvelopes"
HEALTH = "/grpc.health.v1.Health/Check"
SINGLES_IN_FLIGHT = (16, 4)  # connections x streams each: 64 in flight
# 16 batches of 100 in flight, one per connection: with N workers the kernel spreads the
# connections by hash (SO_REUSEPORT): 4 connections split 3:1 or 4:0 over 2 workers 10 times
# in 16, and the worker with one connection idled.
BATCHES_IN_FLIGHT = (16, 1)
WIDTHS = (7, 9, 10, 18, 11, 12, 18, 12)
# The limits are checked on every publish (their cost is part of the figures) but h2load's
# one payer and one address would reach the defaults.
LIMITS_NEVER_REACHED = {
    f"XNODE_LIMIT_PUBLISH_{what}_PER_SECOND": "1e12"
    for what in ("ENVELOPES", "BYTES", "IP_ENVELOPES", "IP_BYTES")
}


def load() -> str:
    return "load {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


# --- ceilings -------------------------------------------------------------------------------


def signing_rate(seconds: float = 2.0) -> float:
    """Signatures per second on one core."""
    key, digest, n = SigningKey.generate(), keccak256(b"x"), 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        for _ in range(500):
            key.sign(digest)
        n += 500
    return n / (time.perf_counter() - started)


def signing_ceiling(cores: int) -> float:
    with ProcessPoolExecutor(cores) as pool:
        return sum(pool.map(signing_rate, [2.0] * cores))


# --- requests -------------------------------------------------------------------------------


def grpc_frame(message: bytes) -> bytes:
    """The 5-byte gRPC frame (uncompressed, length) and the serialized request."""
    return b"\x00" + len(message).to_bytes(4, "big") + message


def write_publishes(path: Path, requests: int, envelopes: int, group: bytes) -> Path:
    """`requests` publishes of `envelopes` payer envelopes each, every one its own, framed
    back to back (what grpc_bodies_load.mjs sends)."""
    with path.open("wb") as out:
        for _ in range(requests):
            out.write(publish_request(envelopes, group))
    return path


def publish_request(envelopes: int, group: bytes) -> bytes:
    payer = [
        build_payer_envelope(group_message_envelope(group, os.urandom(160)), PAYER, NODE)
        for _ in range(envelopes)
    ]
    request = api.PublishPayerEnvelopesRequest(payer_envelopes=payer)
    return grpc_frame(request.SerializeToString())


@dataclass(frozen=True)
class H2Result:
    succeeded: int
    failed: int
    seconds: float
    mean_ms: float = 0.0  # h2load's "time for request" mean

    @property
    def rate(self) -> float:
        return self.succeeded / self.seconds


def require_h2load() -> None:
    if shutil.which("h2load") is None:
        raise SystemExit("h2load is missing: apt-get install -y nghttp2-client")


def h2load(
    address: str,
    path: str,
    body: Path,
    requests: int,
    in_flight: tuple[int, int],
    headers: Sequence[tuple[str, str]] = (),
) -> H2Result:
    """`headers`: more request headers (gRPC metadata), as (name, value)."""
    connections, streams = in_flight
    command = [
        "h2load", f"http://{address}{path}", "-n", str(requests), "-c", str(connections),
        "-m", str(streams), "-t", "1", "-d", str(body),
        "-H", "content-type: application/grpc", "-H", "te: trailers",
        *(arg for name, value in headers for arg in ("-H", f"{name}: {value}")),
    ]  # fmt: skip
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    counts = re.search(r"requests: \d+ total.* (\d+) succeeded, (\d+) failed", out)
    finished = re.search(r"finished in ([\d.]+)(m?s)", out)
    if counts is None or finished is None:
        raise SystemExit(f"cannot read h2load's output:\n{out}")
    seconds = float(finished[1]) / (1000 if finished[2] == "ms" else 1)
    mean = re.search(r"time for request: +\S+ +\S+ +([\d.]+)(m?s|us)", out)
    scale = {"s": 1000, "ms": 1, "us": 0.001}
    mean_ms = float(mean[1]) * scale[mean[2]] if mean else 0.0
    return H2Result(int(counts[1]), int(counts[2]), seconds, mean_ms)


LOADER = Path(__file__).with_name("grpc_bodies_load.mjs")


def require_node() -> None:
    if shutil.which("node") is None:
        raise SystemExit("node (Node.js) is missing: it sends the publishes")


def bodies_load(
    address: str, path: str, bodies: Path, in_flight: tuple[int, int]
) -> tuple[H2Result, float]:
    """Each of `bodies`' requests sent once; and the loader's CPU seconds."""
    connections, streams = in_flight
    before = os.times()
    command = ["node", str(LOADER), address, path, str(bodies), str(connections), str(streams)]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    after = os.times()
    loader_cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    got = json.loads(out)
    result = H2Result(got["succeeded"], got["failed"], got["seconds"], got["mean_ms"])
    if result.failed:
        raise SystemExit(f"publishes refused: grpc-status counts {got['statuses']}")
    return result, loader_cpu


# --- the node -------------------------------------------------------------------------------


def cpu_seconds(pids: list[int], reaped_of: Sequence[int] = ()) -> float:
    """user + system CPU of these live processes, plus what `reaped_of` collected from
    children that exited (fields 14-17 of /proc/PID/stat, in clock ticks)."""
    ticks = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])
        if pid in reaped_of:
            ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


@dataclass
class NodeRun:
    proc: subprocess.Popen[bytes]
    address: str
    dsn: str
    log: Path
    postmaster: int
    worker_count: int
    peak_rss_kb: dict[int, int] = field(default_factory=dict)

    def cpu(self) -> tuple[float, float]:
        """CPU seconds so far of the node (supervisor and workers) and of Postgres."""
        node = cpu_seconds([self.proc.pid, *descendant_pids(self.proc.pid)])
        pg = cpu_seconds([self.postmaster, *descendant_pids(self.postmaster)], [self.postmaster])
        return node, pg

    def workers(self) -> list[int]:
        """The serving processes: the supervisor's children, or the one process (whose
        children, such as multiprocessing's resource tracker, do not serve)."""
        if self.worker_count == 1:
            return [self.proc.pid]
        return child_pids(self.proc.pid)

    def named_workers(self) -> dict[int, str]:
        """pid -> "w<index>", from the supervisor's worker_started events."""
        if self.worker_count == 1:
            return {self.proc.pid: "w0"}
        named = {}
        for line in self.log.read_text(errors="replace").splitlines():
            if '"worker_started"' in line:
                event = json.loads(line[line.index("{") :])
                named[int(event["pid"])] = f"w{event['worker']}"
        return named

    def sample_rss(self) -> None:
        for pid in self.workers():
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            for line in status.splitlines():
                if line.startswith("VmRSS:"):
                    kb = int(line.split()[1])
                    self.peak_rss_kb[pid] = max(self.peak_rss_kb.get(pid, 0), kb)

    def stored(self) -> int:
        async def count() -> int:
            conn = await asyncpg.connect(self.dsn)
            try:
                sql = "SELECT count(*) FROM originator_envelopes WHERE originator_node_id = $1"
                return int(await conn.fetchval(sql, NODE))
            finally:
                await conn.close()

        return asyncio.run(count())

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)
        for line in self.log.read_text(errors="replace").splitlines():
            if '"sequencer_appends"' in line or '"sequencer_link_stopped"' in line:
                print(f"    {line}")


def start_node(
    cluster: PgCluster,
    work: Path,
    key: SigningKey,
    workers: int,
    command: Sequence[str] = ("-m", "xnode.cli", "run"),
    database: str = "",
) -> NodeRun:
    """`xnode run` (or `command`, run by this Python, which starts it its own way) on its
    own `database` (default bench_w<workers>), logging to <database>.log."""
    database = database or f"bench_w{workers}"
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
        "XNODE_LOG_FORMAT": "json",
        "XNODE_WORKERS": str(workers),
        **LIMITS_NEVER_REACHED,
    }
    log = work / f"{database}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, *command], env=env, stdout=out, stderr=out)
    postmaster = int((cluster.data_dir / "postmaster.pid").read_text().split()[0])
    run = NodeRun(proc, address, cluster.dsn(database), log, postmaster, workers)
    deadline = time.monotonic() + 120
    while workers > 1 and "node_workers_serving" not in log.read_text(errors="replace"):
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit(f"node did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    if not wait_serving(address):
        proc.kill()
        raise SystemExit("node did not start")
    return run


@dataclass(frozen=True)
class Rate:
    """Envelopes per second, and CPU microseconds per envelope (user + system, from /proc)
    of the node's processes and of Postgres's over the same run."""

    per_second: float = 0.0
    node_us: float = 0.0
    postgres_us: float = 0.0
    mean_ms: float = 0.0  # per request

    def __str__(self) -> str:
        return (
            f"{self.per_second:9,.0f}/s   CPU per envelope: node {self.node_us:,.0f} us, "
            f"Postgres {self.postgres_us:,.0f} us; mean {self.mean_ms:.2f} ms per request"
        )


@dataclass
class Figures:
    health: float = 0.0
    singles: Rate = Rate()
    batches: Rate = Rate()
    peak_rss_mb: float = 0.0


def publish_run(node: NodeRun, bodies: Path, each: int, in_flight: tuple[int, int]) -> Rate:
    """Envelopes per second, after checking that every one sent was stored."""
    before = node.stored()
    named = node.named_workers()
    each_cpu = {pid: cpu_seconds([pid]) for pid in named}
    node_cpu, pg_cpu = node.cpu()
    result, loader_cpu = bodies_load(node.address, PUBLISH, bodies, in_flight)
    node_after, pg_after = node.cpu()
    shares = ", ".join(
        f"{named[pid]} {(cpu_seconds([pid]) - cpu) / result.seconds:.0%}"
        for pid, cpu in sorted(each_cpu.items(), key=lambda item: named[item[0]])
    )
    print(
        f"      share of a core per worker: {shares}; the loader's "
        f"{loader_cpu / result.seconds:.0%} ({loader_cpu * 1e6 / result.succeeded:,.0f} us "
        "per request)"
    )
    stored = node.stored() - before
    if stored != result.succeeded * each:
        raise SystemExit(
            f"{result.succeeded} publishes answered OK, but the node stored {stored} "
            f"envelopes (expected {result.succeeded * each})"
        )
    envelopes = result.succeeded * each
    return Rate(
        result.rate * each,
        (node_after - node_cpu) * 1e6 / envelopes,
        (pg_after - pg_cpu) * 1e6 / envelopes,
        result.mean_ms,
    )


def measure(node: NodeRun, bodies: dict[str, Path], args: argparse.Namespace) -> Figures:
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            node.sample_rss()
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    figures = Figures()
    try:
        h2load(node.address, HEALTH, bodies["health"], 2000, SINGLES_IN_FLIGHT)  # warm-up
        node_cpu, _ = node.cpu()
        figures.health = h2load(
            node.address, HEALTH, bodies["health"], args.health, SINGLES_IN_FLIGHT
        ).rate
        per_call = (node.cpu()[0] - node_cpu) * 1e6 / args.health
        print(
            f"    empty calls (Health/Check)  {figures.health:9,.0f}/s   CPU per call: node "
            f"{per_call:,.0f} us   {load()}"
        )
        publish_run(node, bodies["warm-up"], 1, SINGLES_IN_FLIGHT)
        figures.singles = publish_run(node, bodies["single"], 1, SINGLES_IN_FLIGHT)
        print(f"    single publishes            {figures.singles}   {load()}")
        # One at a time: the latency a lone client sees (the group commit must not hold it).
        lone = publish_run(node, bodies["lone"], 1, (1, 1))
        print(f"    single publishes, 1 in flight {lone}   {load()}")
        figures.batches = publish_run(node, bodies["batch"], 100, BATCHES_IN_FLIGHT)
        print(f"    batches of 100 (envelopes)  {figures.batches}   {load()}")
    finally:
        stop.set()
        watcher.join()
    figures.peak_rss_mb = max(node.peak_rss_kb.values(), default=0) / 1024
    return figures


def report(by_workers: dict[int, Figures], signing: dict[int, float]) -> None:
    one = by_workers.get(1)
    print(f"\nceilings: signing {signing[1]:,.0f}/s on 1 core, {signing[2]:,.0f}/s on 2 cores")
    columns = ["workers", "empty/s", "singles/s", "singles/empty(1w)", "vs 1 worker"]
    columns += ["batch env/s", "of 2-core signing", "peak RSS MB"]
    print(" ".join(f"{c:>{w}}" for c, w in zip(columns, WIDTHS, strict=True)))
    for workers, f in sorted(by_workers.items()):
        ratio = f.singles.per_second / one.health if one and one.health else float("nan")
        scale = f.singles.per_second / one.singles.per_second if one else float("nan")
        print(
            f"{workers:>7} {f.health:>9,.0f} {f.singles.per_second:>10,.0f} {ratio:>18.2f} "
            f"{scale:>10.2f}x {f.batches.per_second:>12,.0f} "
            f"{f.batches.per_second / signing[2]:>18.2f} {f.peak_rss_mb:>12.0f}"
        )
    print("goals: singles >= 0.8 of one worker's empty calls; 2 workers >= 1.6x one; "
          "batches >= 15,000 envelopes/s on 2 cores; RSS <= 200 MB per worker")  # fmt: skip
    print(load())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", default="1,2", help="worker counts to run, comma-separated")
    parser.add_argument("--health", type=int, default=40_000, help="Health/Check requests")
    parser.add_argument("--singles", type=int, default=20_000, help="single publishes")
    parser.add_argument("--batches", type=int, default=400, help="publishes of 100 envelopes")
    parser.add_argument("--lone", type=int, default=2000, help="single publishes, 1 in flight")
    args = parser.parse_args()
    require_h2load()
    require_node()
    work = Path(tempfile.mkdtemp(prefix="xnode-bench-cores-"))
    work.chmod(0o755)
    print(f"start: {load()}, {os.cpu_count()} cores")
    signing = {cores: signing_ceiling(cores) for cores in (1, 2)}
    print(f"signing: {signing[1]:,.0f}/s on 1 core, {signing[2]:,.0f}/s on 2 cores   {load()}")
    bodies = {"health": work / "health.bin"}
    bodies["health"].write_bytes(grpc_frame(b""))
    cluster = start_cluster(work / "pg", fsync=True)
    by_workers: dict[int, Figures] = {}
    try:
        for workers in (int(w) for w in args.workers.split(",")):
            # Publishes of their own for each node (the same again would be replays).
            bodies |= {
                "warm-up": write_publishes(work / "warm-up.bin", 1000, 1, b"\x01" * 16),
                "single": write_publishes(work / "single.bin", args.singles, 1, b"\x01" * 16),
                "lone": write_publishes(work / "lone.bin", args.lone, 1, b"\x01" * 16),
                "batch": write_publishes(work / "batch.bin", args.batches, 100, b"\x02" * 16),
            }
            print(f"{workers} worker(s):")
            node = start_node(cluster, work, SigningKey.generate(), workers)
            try:
                by_workers[workers] = measure(node, bodies, args)
            finally:
                node.stop()
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    report(by_workers, signing)


if __name__ == "__main__":
    main()
