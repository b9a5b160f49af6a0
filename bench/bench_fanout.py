"""Live fan-out at saturation: thousands of SubscribeEnvelopes streams held by h2load
(Debian's nghttp2-client, one C process per ~400 streams), a few Python streams beside them
measuring publish -> delivery latency. Each figure is printed beside the empty-stream ceiling
from the same run: bare grpc.aio servers (uvloop, as the node; as many processes as the node
has workers, sharing the port) holding the same streams and pushing the same bytes at the
same rate, Python streams beside them timing each push from
its command to its arrival (what the machine adds at that load, with no publish to commit).

    .venv/bin/python bench/bench_fanout.py [--scenario topics,one-topic] [--seconds 20]

Scenarios:
- topics: 10,000 streams, 200 messages/s over 1,000 topics published on another node (B) and
  replicated to the measured one (A). h2load sends one request body per process, so its ~400
  streams share one query: process i subscribes to topic i. Each envelope then reaches 10
  streams on average, as with 10 streams on each of 1,000 topics.
- one-topic: 1,000 streams on one topic, 40 messages/s published on the node itself (40,000
  deliveries/s).

Deliveries complete: the node's count (xnode_subscription_deliveries_total) against published
x streams, every stream still open at the end, and every envelope on every Python stream.
Starts its own Postgres cluster (fsync on).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import grpc
import uvloop
from bench_cores import cpu_seconds, grpc_frame, require_h2load
from bench_node import PAYER, percentile
from bench_replication import Nodes, fresh_database

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xnode.client.node import NodeClient, group_message_envelope
from xnode.core import wire
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import build_payer_envelope, parse_originator_envelope
from xnode.devtools.postgres import PgCluster, free_port, start_cluster
from xnode.devtools.processes import descendant_pids

A, B = 100, 200
SUBSCRIBE = "/xmtp.xmtpv4.message_api.ReplicationApi/SubscribeEnvelopes"
PER_PROCESS = 400  # streams per h2load process
# Subscribers are many clients, each on its connection: the kernel spreads connections, not
# streams, over the node's worker processes (SO_REUSEPORT), so a few connections carrying
# hundreds of streams each can leave one worker with most of them.
STREAMS_PER_CONNECTION = 10
LATENCY_STREAMS = 4
PAYLOAD_BYTES = 160


def topic(i: int) -> bytes:
    return b"\x00" + i.to_bytes(16, "big")


def group(i: int) -> bytes:
    return i.to_bytes(16, "big")


@dataclass(frozen=True)
class Scenario:
    name: str
    streams: int
    topics: int  # messages spread over these
    rate: float  # messages per second
    publish_on: int  # the node publishes are sent to
    per_connection: int = STREAMS_PER_CONNECTION  # h2load streams on one connection

    @property
    def processes(self) -> int:
        return -(-self.streams // PER_PROCESS)

    def subscribed(self, process: int) -> int:
        """The topic index process `process` subscribes to."""
        return process * self.topics // self.processes

    @property
    def deliveries_per_s(self) -> float:
        return self.rate * self.streams / self.topics


SCENARIOS = {
    "topics": Scenario("10,000 streams, 1,000 topics, 200 msg/s on B", 10_000, 1_000, 200, B),
    "one-topic": Scenario("1,000 streams, one topic, 40 msg/s", 1_000, 1, 40, A),
}


# --- h2load ---------------------------------------------------------------------------------


def subscribe_body(work: Path, index: int) -> Path:
    request = api.SubscribeEnvelopesRequest(query=api.EnvelopesQuery(topics=[topic(index)]))
    path = work / f"subscribe-{index}.bin"
    if not path.exists():  # never rewritten: a running h2load maps it
        path.write_bytes(grpc_frame(request.SerializeToString()))
    return path


def start_h2load(
    address: str, body: Path, streams: int, per_connection: int, log: Path
) -> subprocess.Popen[bytes]:
    """h2load holding `streams` streams, `per_connection` on each connection, until killed."""
    connections = max(1, streams // per_connection)
    command = [
        "h2load", f"http://{address}{SUBSCRIBE}", "-c", str(connections),
        "-m", str(-(-streams // connections)), "-t", "1", "-d", str(body), "-D", "3600",
        "-H", "content-type: application/grpc", "-H", "te: trailers",
    ]  # fmt: skip
    with log.open("wb") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)


def running(loads: list[subprocess.Popen[bytes]], logs: list[Path]) -> bool:
    """True, or SystemExit when one of them has stopped."""
    for proc, log in zip(loads, logs, strict=True):
        if proc.poll() is not None:
            raise SystemExit(f"h2load exited ({proc.returncode}):\n{log.read_text()[-2000:]}")
    return True


# --- the measured servers -------------------------------------------------------------------


def streams_on(scenario: Scenario) -> dict[int, int]:
    """Topic index -> h2load streams subscribed to it."""
    on: dict[int, int] = {}
    for process in range(scenario.processes):
        share = min(PER_PROCESS, scenario.streams - process * PER_PROCESS)
        on[scenario.subscribed(process)] = on.get(scenario.subscribed(process), 0) + share
    return on


def sequence_id(envelope: envelopes_pb2.OriginatorEnvelope) -> int:
    return parse_originator_envelope(envelope.SerializeToString()).sequence_id


def rss_kb(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:  # exited meanwhile
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total


def scrape(address: str) -> str:
    """A node's metrics; empty when the node is too busy to answer within 10 s (opening
    thousands of streams at once)."""
    try:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as reply:
            return str(reply.read().decode())
    except OSError:  # TimeoutError included
        return ""


def metric(address: str, name: str) -> float:
    """The sum of a metric's samples on a node's metrics port (0 when it did not answer)."""
    lines = scrape(address).splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(name))


async def until(check: Callable[[], bool], within_s: float, what: Callable[[], str]) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"not reached within {within_s:.0f} s: {what()}")
        await asyncio.sleep(0.2)


EMPTY_STREAMS = """
import asyncio, sys, grpc, uvloop
held = set()
async def hold(request, context):
    entry = (request, asyncio.Queue())
    held.add(entry)
    try:
        while True:
            yield await entry[1].get()
    finally:
        held.discard(entry)
async def commands():
    # stdin lines: "<request hex> <frame hex>": the frame to every stream opened with that
    # request; answers the streams held. An empty line only answers.
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        key, _, frame = line.decode().strip().partition(" ")
        if frame:
            key, frame = bytes.fromhex(key), bytes.fromhex(frame)
            for entry in [e for e in held if e[0] == key]:
                entry[1].put_nowait(frame)
        print(len(held), flush=True)
async def main():
    server = grpc.aio.server()
    same = dict(request_deserializer=lambda b: b, response_serializer=lambda b: b)
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
        "xmtp.xmtpv4.message_api.ReplicationApi",
        {"SubscribeEnvelopes": grpc.unary_stream_rpc_method_handler(hold, **same)})])
    server.add_insecure_port(sys.argv[1])
    await server.start()
    print("ready", flush=True)
    await commands()
uvloop.run(main())
"""


@dataclass
class Figures:
    kb_per_stream: float = 0.0
    cpu_us_per_delivery: float = 0.0
    deliveries: float = 0.0  # counted by the server over the publishing
    expected: float = 0.0  # published x the streams each reaches
    per_second: float = 0.0
    still_open: float = 0.0  # streams open once every delivery was counted
    fell_behind: float = 0.0  # streams the node ended for falling behind
    latencies_ms: list[float] = field(default_factory=list)
    missing: int = 0  # envelopes a Python stream never got
    answers_ms: list[float] = field(default_factory=list)  # publish, sent to answered
    # What each serving process held: connections (node workers), streams (bare servers).
    per_process: list[float] = field(default_factory=list)


# publish(i): sends message i (topic i % topics); returns when answered.
Publish = Callable[[int], Coroutine[Any, Any, None]]


class Server:
    """What `drive` measures: a process, its streams count and its deliveries count."""

    pid: int
    address: str

    def pids(self) -> list[int]:
        return [self.pid]

    def open_streams(self) -> float:
        raise NotImplementedError

    def delivered(self) -> float:
        raise NotImplementedError


async def drive(
    scenario: Scenario,
    work: Path,
    server: Server,
    publish: Publish,
    seconds: float,
    beside: int = 0,
) -> tuple[Figures, list[subprocess.Popen[bytes]]]:
    """Holds the streams, then publishes at the scenario's rate for `seconds`. `beside`:
    streams already open on every subscribed topic (the Python ones)."""
    before_kb = rss_kb(server.pids())
    loads, logs = [], []
    for process in range(scenario.processes):
        share = min(PER_PROCESS, scenario.streams - process * PER_PROCESS)
        body = subscribe_body(work, scenario.subscribed(process))
        logs.append(work / f"h2load-{process}.log")
        loads.append(start_h2load(server.address, body, share, scenario.per_connection, logs[-1]))
    try:
        alive = lambda: running(loads, logs)  # noqa: E731
        figures = await _measure(scenario, server, publish, seconds, beside, before_kb, alive)
        running(loads, logs)
    except BaseException:
        finish(loads)
        raise
    return figures, loads


async def _measure(
    scenario: Scenario,
    server: Server,
    publish: Publish,
    seconds: float,
    beside: int,
    before_kb: int,
    alive: Callable[[], bool],
) -> Figures:
    """`alive` is True, or raises when a load generator has stopped."""
    figures = Figures()
    wanted = scenario.streams + beside
    await until(
        lambda: alive() and server.open_streams() >= wanted,
        120 + wanted / 20,
        lambda: f"{wanted} streams open (now {server.open_streams():,.0f})",
    )
    figures.kb_per_stream = (rss_kb(server.pids()) - before_kb) / scenario.streams
    await asyncio.sleep(1.0)  # the streams' caught-up frames out of the way
    cpu_before, delivered_before = cpu_seconds(server.pids()), server.delivered()
    started = time.perf_counter()
    count = int(scenario.rate * seconds)
    tasks: list[asyncio.Task[None]] = []
    for i in range(count):
        delay = started + i / scenario.rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(publish(i)))
    await asyncio.gather(*tasks)
    on = streams_on(scenario)
    figures.expected = sum(
        on[i % scenario.topics] + beside for i in range(count) if i % scenario.topics in on
    )
    await until(
        lambda: server.delivered() - delivered_before >= figures.expected,
        60,
        lambda: (
            f"{figures.expected:,.0f} delivered (now {server.delivered() - delivered_before:,.0f})"
        ),
    )
    elapsed = time.perf_counter() - started
    figures.deliveries = server.delivered() - delivered_before
    figures.per_second = figures.deliveries / elapsed
    figures.cpu_us_per_delivery = (
        (cpu_seconds(server.pids()) - cpu_before) * 1e6 / max(1.0, figures.deliveries)
    )
    figures.still_open = server.open_streams()
    return figures


def finish(loads: list[subprocess.Popen[bytes]]) -> None:
    """Ends the h2load processes (they print nothing when stopped early: the counts are the
    servers')."""
    for proc in loads:
        proc.kill()
        proc.wait()


# --- the two servers ------------------------------------------------------------------------


class NodeServer(Server):
    def __init__(self, nodes: Nodes, node_id: int, metrics: str) -> None:
        self.pid = nodes.processes[node_id].pid
        self.address = nodes.addresses[node_id]
        self.metrics = metrics

    def pids(self) -> list[int]:
        return [self.pid, *descendant_pids(self.pid)]  # its worker processes

    def open_streams(self) -> float:
        return metric(self.metrics, "xnode_open_subscriptions{")

    def delivered(self) -> float:
        return metric(self.metrics, "xnode_subscription_deliveries_total{")

    def connections_per_worker(self) -> list[float]:
        """Client connections each worker process holds (the kernel spreads them over the
        workers' listeners; each h2load connection carries its share of the streams)."""
        port = self.address.rsplit(":", 1)[1]

        def sockets(*state: str) -> str:
            command = ["ss", "-Htnp", *state, f"( sport = :{port} )"]
            return subprocess.run(command, capture_output=True, text=True, check=True).stdout

        listening = sockets("-l")
        workers = sorted(p for p in self.pids() if f"pid={p}," in listening)
        established = sockets("state", "established")
        return [float(established.count(f"pid={pid},")) for pid in workers]

    def fell_behind(self) -> float:
        return metric(
            self.metrics,
            'xnode_subscriptions_ended_total{method="SubscribeEnvelopes",reason="fell_behind"',
        )


class EmptyServer(Server):
    """The ceiling: bare grpc.aio server processes sharing one port (SO_REUSEPORT, as the
    node's workers), holding streams and pushing bytes to them, told what to push on their
    stdin."""

    def __init__(self, processes: int) -> None:
        self.address = f"127.0.0.1:{free_port()}"
        self.procs = [
            subprocess.Popen(
                [sys.executable, "-c", EMPTY_STREAMS, self.address],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            for _ in range(processes)
        ]
        for proc in self.procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        self.pid = self.procs[0].pid
        self.held = 0.0
        self.per_process: list[float] = []
        self.pushed = 0.0
        self._lock = asyncio.Lock()

    def pids(self) -> list[int]:
        return [proc.pid for proc in self.procs]

    async def command(self, line: str) -> None:
        """To every process (each holds its share of the streams); their counts summed."""
        async with self._lock:
            for proc in self.procs:
                assert proc.stdin is not None
                proc.stdin.write(line.encode() + b"\n")
                proc.stdin.flush()
            counts = await asyncio.gather(*(asyncio.to_thread(_count, p) for p in self.procs))
            self.held = float(sum(counts))
            self.per_process = [float(c) for c in counts]

    def open_streams(self) -> float:
        return self.held

    def delivered(self) -> float:
        return self.pushed

    def stop(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()


def _count(proc: subprocess.Popen[bytes]) -> int:
    assert proc.stdout is not None
    return int(proc.stdout.readline())


async def ceiling(
    scenario: Scenario, work: Path, seconds: float, frame: bytes, processes: int
) -> Figures:
    """The same streams, bytes and rate on as many bare server processes as the node has
    workers, and Python streams beside them timing each push from the command to its arrival
    (on the first topic streams hold)."""
    server = EmptyServer(processes)
    on = streams_on(scenario)
    requests = {i: subscribe_body(work, i).read_bytes()[5:] for i in on}  # without the prefix
    probe = min(on)
    hits = sum(1 for i in range(int(scenario.rate * seconds)) if i % scenario.topics == probe)
    sent: list[float] = []

    async def count_streams() -> None:
        while True:
            await server.command("")
            await asyncio.sleep(0.5)

    async def publish(i: int) -> None:
        index = i % scenario.topics
        if index in on:
            if index == probe:
                sent.append(time.perf_counter())
            await server.command(f"{requests[index].hex()} {frame.hex()}")
            server.pushed += on[index] + (LATENCY_STREAMS if index == probe else 0)

    counting = asyncio.create_task(count_streams())
    readers = [
        asyncio.create_task(bare_arrivals(server.address, requests[probe], hits))
        for _ in range(LATENCY_STREAMS)
    ]
    try:
        figures, loads = await drive(scenario, work, server, publish, seconds, LATENCY_STREAMS)
        figures.per_process = server.per_process
        finish(loads)
        done, pending = await asyncio.wait(readers, timeout=60)
        for task in done:
            arrivals = task.result()  # in push order: the k-th is the k-th command's
            figures.missing += hits - len(arrivals)
            figures.latencies_ms += [(at - s) * 1e3 for s, at in zip(sent, arrivals, strict=False)]
        figures.missing += len(pending) * hits
        return figures
    finally:
        counting.cancel()
        for reader in readers:
            reader.cancel()
        server.stop()


async def bare_arrivals(address: str, request: bytes, count: int) -> list[float]:
    """When each of the bare server's first `count` pushes reached a stream of its own."""
    arrivals: list[float] = []
    async with grpc.aio.insecure_channel(address) as channel:
        same = {"request_serializer": bytes, "response_deserializer": bytes}
        call = channel.unary_stream(SUBSCRIBE, **same)(request)
        async for _ in call:
            arrivals.append(time.perf_counter())
            if len(arrivals) >= count:
                break
        call.cancel()
    return arrivals


# --- the node -------------------------------------------------------------------------------


async def latency_streams(
    address: str, topics: list[bytes], count: int
) -> tuple[list[asyncio.Task[dict[int, float]]], asyncio.Event]:
    """LATENCY_STREAMS Python streams, each on its own connection: arrival time per sequence
    id (every scenario's envelopes have one originator)."""
    ready = asyncio.Event()
    opened = [0]

    async def one() -> dict[int, float]:
        arrivals: dict[int, float] = {}
        async with NodeClient(address, own_connection=True) as client:
            call = client.subscribe(topics=topics)
            responses = call.__aiter__()
            await responses.__anext__()  # caught up
            opened[0] += 1
            if opened[0] == LATENCY_STREAMS:
                ready.set()
            async for response in responses:
                now = time.perf_counter()
                for envelope in response.envelopes:
                    arrivals.setdefault(sequence_id(envelope), now)
                if len(arrivals) >= count:
                    break
            call.cancel()
        return arrivals

    return [asyncio.create_task(one()) for _ in range(LATENCY_STREAMS)], ready


async def on_node(
    scenario: Scenario, work: Path, cluster: PgCluster, seconds: float, workers: int
) -> tuple[Figures, bytes]:
    keys = {A: SigningKey.generate()}
    if scenario.publish_on == B:
        keys[B] = SigningKey.generate()
    nodes = Nodes(work, cluster, keys)
    metrics = f"127.0.0.1:{free_port()}"
    unlimited = {"XNODE_LIMITS_ENABLED": "false"}
    for node_id in keys:
        measured = {"XNODE_METRICS_ADDRESS": metrics, "XNODE_WORKERS": str(workers)}
        extra = {**unlimited, **measured} if node_id == A else unlimited
        database = await asyncio.to_thread(fresh_database, cluster, f"fanout_{node_id}")
        await asyncio.to_thread(nodes.start, node_id, database, extra)
    await until(
        # One process has no worker label; several label their samples (worker_metrics).
        lambda: workers == 1 or all(f'worker="{i}"' in scrape(metrics) for i in range(workers)),
        60,
        lambda: f"the node's {workers} worker processes serving",
    )
    count = int(scenario.rate * seconds)
    on = streams_on(scenario)
    messages = [
        build_payer_envelope(
            group_message_envelope(group(i % scenario.topics), os.urandom(PAYLOAD_BYTES)),
            PAYER,
            scenario.publish_on,
        )
        for i in range(count)
    ]
    sent: dict[int, float] = {}
    answers_ms: list[float] = []
    hits = sum(1 for i in range(count) if i % scenario.topics in on)
    server = NodeServer(nodes, A, metrics)
    frame = b""
    try:
        readers, ready = await latency_streams(
            nodes.addresses[A], [topic(t) for t in sorted(on)], hits
        )
        await asyncio.wait_for(ready.wait(), 60)
        async with NodeClient(nodes.addresses[scenario.publish_on]) as publisher:

            async def publish(i: int) -> None:
                nonlocal frame
                started = time.perf_counter()
                answered = await publisher.publish([messages[i]])
                sent[sequence_id(answered[0])] = started
                answers_ms.append((time.perf_counter() - started) * 1e3)
                frame = frame or wire.field(1, answered[0].SerializeToString())

            fell_before = server.fell_behind()
            figures, loads = await drive(scenario, work, server, publish, seconds, LATENCY_STREAMS)
            figures.fell_behind = server.fell_behind() - fell_before
            figures.per_process = server.connections_per_worker()
        done, pending = await asyncio.wait(readers, timeout=60)
        for task in pending:
            task.cancel()
        for task in done:
            arrivals = task.result()
            figures.missing += hits - len(arrivals)
            figures.latencies_ms += [(at - sent[i]) * 1e3 for i, at in arrivals.items()]
        figures.missing += len(pending) * hits
        finish(loads)
        figures.answers_ms = answers_ms
        return figures, frame
    finally:
        nodes.stop()


# --- report ---------------------------------------------------------------------------------


def _ratio(node: float, bare: float) -> str:
    return f"{node / bare:.2f}" if bare else ""


def report(scenario: Scenario, node: Figures, bare: Figures, frame_len: int) -> None:
    print(f"\n### {scenario.name}, envelopes of {frame_len} bytes framed\n")
    print("| measure | node | empty-stream ceiling | ratio |\n|---|---|---|---|")
    lat, bare_lat = node.latencies_ms, bare.latencies_ms
    p50, p99 = (percentile(lat, 50), percentile(lat, 99)) if lat else (0.0, 0.0)
    bare_p50, bare_p99 = (
        (percentile(bare_lat, 50), percentile(bare_lat, 99)) if bare_lat else (0.0, 0.0)
    )
    rows = [
        (
            "deliveries counted / expected (h2load streams + Python streams)",
            f"{node.deliveries:,.0f} / {node.expected:,.0f}",
            f"{bare.deliveries:,.0f} / {bare.expected:,.0f}",
            "",
        ),
        (
            "deliveries per second",
            f"{node.per_second:,.0f}",
            f"{bare.per_second:,.0f}",
            _ratio(node.per_second, bare.per_second),
        ),
        (
            "resident memory per open stream",
            f"{node.kb_per_stream:.1f} KB",
            f"{bare.kb_per_stream:.1f} KB",
            _ratio(node.kb_per_stream, bare.kb_per_stream),
        ),
        (
            "CPU per delivery (user + system)",
            f"{node.cpu_us_per_delivery:.1f} us",
            f"{bare.cpu_us_per_delivery:.1f} us",
            _ratio(node.cpu_us_per_delivery, bare.cpu_us_per_delivery),
        ),
        (
            f"publish -> Python stream, p50 ({len(lat)} / {len(bare_lat)} samples)",
            f"{p50:.1f} ms",
            f"{bare_p50:.1f} ms",
            _ratio(p50, bare_p50),
        ),
        (
            "publish -> Python stream, p99 (goal: node <= 100 ms)",
            f"{p99:.1f} ms",
            f"{bare_p99:.1f} ms",
            _ratio(p99, bare_p99),
        ),
        ("envelopes the Python streams missed", f"{node.missing}", f"{bare.missing}", ""),
        (
            "publish answered (of the above), p50 / p99",
            f"{percentile(node.answers_ms, 50):.1f} / {percentile(node.answers_ms, 99):.1f} ms",
            "",
            "",
        ),
        (
            "held by each process: connections (node) / streams (bare)",
            " / ".join(f"{n:,.0f}" for n in node.per_process),
            " / ".join(f"{n:,.0f}" for n in bare.per_process),
            "",
        ),
        (
            "streams open at the end / ended for falling behind",
            f"{node.still_open:,.0f} / {node.fell_behind:.0f}",
            f"{bare.still_open:,.0f}",
            "",
        ),
    ]
    for row in rows:
        print("| " + " | ".join(row) + " |", flush=True)


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--scenario", default="topics,one-topic", help="comma-separated: " + ", ".join(SCENARIOS)
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="publishing, per scenario")
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="serving processes of the measured node (xnode run --workers); the streams spread"
        " over them, its CPU and memory are summed",
    )
    parser.add_argument(
        "--streams-per-connection",
        type=int,
        default=STREAMS_PER_CONNECTION,
        help="h2load streams sharing one connection (the kernel spreads connections over the"
        " workers)",
    )
    args = parser.parse_args()
    require_h2load()
    work = Path(tempfile.mkdtemp(prefix="xnode-fanout-"))
    work.chmod(0o755)
    cluster = start_cluster(work / "pg", fsync=True)
    load = os.getloadavg()[0]
    print(
        f"machine: {os.cpu_count()} cores, load {load:.1f}; {PER_PROCESS} streams per h2load,"
        f" {args.streams_per_connection} a connection;"
        f" the node runs {args.workers} worker process(es)"
    )
    try:
        for name in args.scenario.split(","):
            scenario = replace(SCENARIOS[name], per_connection=args.streams_per_connection)
            node, frame = await on_node(scenario, work, cluster, args.seconds, args.workers)
            bare = await ceiling(scenario, work, args.seconds, frame, args.workers)
            report(scenario, node, bare, len(frame))
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    uvloop.run(main())
