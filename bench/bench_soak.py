"""Soak benchmark: three replicating nodes under a steady mixed load for a long
time; resident memory and replication lag sampled every 10 s, plotted to docs/soak.svg.

    .venv/bin/python bench/bench_soak.py [--minutes 30] [--rate 500] [--warmup-minutes 5]
        [--svg docs/soak.svg] [--work DIR]

The nodes are a devnet's (keys, databases and ports from xnode.devtools.devnet.plan_nodes, a
static registry file; no chain, so anvil's CPU stays out of the figures) on one Postgres cluster
with fsync on. The load, all from this process:
- publish: `--rate` envelopes/s in total, spread evenly over the three nodes on a fixed
  schedule (whatever the answers do), over `--topics` group topics, signed by `--payers`
  payers in turn (500/s is many payers' traffic: one payer would sit at 83% of a node's
  per-payer limit, and any burst would be refused); the envelopes that came due for a node
  go out together every `--batch-ms` (20 ms: 3-4 per request at 500/s, what a payer service
  forwarding many clients' messages sends; 0: one envelope per request);
- query: one loop of requests for 100 of a random topic on a random node, `1/--queries` s
  apart (so somewhat fewer than `--queries`/s);
- subscribe: one long-lived subscriber per node on a sample of the topics (every
  `--sample`-th), which times each envelope of another originator from its originator
  timestamp to its arrival (the replication lag), and one short subscription per second that
  opens, reads its first answer and closes (subscription churn).
Goals (printed beside the results): RSS of each node flat within 10% after the warm-up
(max/min of the samples after it), replication lag p99 under 1 s, no errors (failed requests,
broken streams, envelopes of the sampled topics missing at a subscriber at the end).
The machine is shared: the load average is sampled beside every point.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import uvloop

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.client.node import NodeClient, envelopes_of, group_message_envelope
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import build_payer_envelope
from xnode.devtools.devnet import DevNode, plan_nodes, wait_serving, write_registry_file
from xnode.devtools.postgres import PgCluster, start_cluster
from xnode.store.migrate import upgrade_to_head

SAMPLE_SECONDS = 10.0
PAYLOAD_BYTES = 200
# Publishes awaiting an answer at most; beyond it a send is shed and counted as an error (an
# open-loop generator on a starved machine would otherwise queue without bound).
MAX_IN_FLIGHT = 1000
MARK = b"soak-index:"  # before the index in each payload (the node frames it as MLS)


def group_of(topic_index: int) -> bytes:
    return topic_index.to_bytes(16, "big")


def topic_of(topic_index: int) -> bytes:
    return b"\x00" + group_of(topic_index)


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def percentile(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


@dataclass
class Sample:
    at_s: float
    rss_mb: dict[int, float]
    lag_p50_s: float
    lag_p99_s: float
    lag_max_s: float
    published: int
    queries: int
    errors: int
    load: float


@dataclass
class Soak:
    nodes: list[DevNode]
    clients: dict[int, NodeClient]
    topics: int
    sample_every: int
    payers: list[SigningKey] = field(default_factory=lambda: [SigningKey.generate()])
    published: int = 0
    queries: int = 0
    errors: int = 0
    error_kinds: dict[str, int] = field(default_factory=dict)
    lags: list[float] = field(default_factory=list)  # since the last sample
    all_lags: list[float] = field(default_factory=list)  # after the warm-up
    sampled_sent: dict[int, set[int]] = field(default_factory=dict)  # topic -> payload indexes
    received: dict[int, set[tuple[int, int]]] = field(default_factory=dict)  # node -> seen
    stopping: bool = False
    in_flight: int = 0  # envelopes sent and not yet answered

    def error(self, kind: str) -> None:
        self.errors += 1
        self.error_kinds[kind] = self.error_kinds.get(kind, 0) + 1

    def envelope(self, node: DevNode, index: int) -> envelopes_pb2.PayerEnvelope:
        data = MARK + index.to_bytes(8, "big") + os.urandom(PAYLOAD_BYTES - 8 - len(MARK))
        payer = self.payers[index % len(self.payers)]
        client = group_message_envelope(group_of(index % self.topics), data)
        return build_payer_envelope(client, payer, node.node_id)

    async def publish_some(self, node: DevNode, indexes: list[int]) -> None:
        envelopes = [self.envelope(node, i) for i in indexes]
        try:
            await self.clients[node.node_id].publish(envelopes, deadline_s=30)
        except grpc.aio.AioRpcError as exc:
            for _ in indexes:
                self.error(f"publish {exc.code().name}")
            return
        finally:
            self.in_flight -= len(indexes)
        self.published += len(indexes)
        for index in indexes:
            topic = index % self.topics
            if topic % self.sample_every == 0:
                self.sampled_sent.setdefault(topic, set()).add(index)

    async def publishers(self, rate: float, until: float, batch_s: float) -> None:
        """Envelope i comes due at i / rate s, for node i % 3; what came due for a node goes
        out together, every `batch_s` (0: each alone, when it comes due)."""
        interval, started, index = 1.0 / rate, time.perf_counter(), 0
        pending: set[asyncio.Task[None]] = set()
        while time.perf_counter() < until:
            tick = max(batch_s, interval)
            due_until = min(time.perf_counter() + tick, until) - started
            due: dict[int, list[int]] = {}
            while index * interval < due_until:
                due.setdefault(index % len(self.nodes), []).append(index)
                index += 1
            for n, indexes in due.items():
                if self.in_flight + len(indexes) > MAX_IN_FLIGHT:  # nodes fell behind: shed
                    for _ in indexes:
                        self.error("publish shed (too many in flight)")
                    continue
                self.in_flight += len(indexes)
                task = asyncio.create_task(self.publish_some(self.nodes[n], indexes))
                pending.add(task)
                task.add_done_callback(pending.discard)
            delay = started + due_until - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
        await asyncio.gather(*pending)

    async def queriers(self, rate: float, until: float) -> None:
        while time.perf_counter() < until:
            node = random.choice(self.nodes)
            try:
                await self.clients[node.node_id].query(
                    topics=[topic_of(random.randrange(self.topics))], limit=100
                )
                self.queries += 1
            except grpc.aio.AioRpcError as exc:
                self.error(f"query {exc.code().name}")
            await asyncio.sleep(1.0 / rate)

    async def subscriber(self, node: DevNode, ready: asyncio.Event, warmup_until: float) -> None:
        sampled = [topic_of(t) for t in range(0, self.topics, self.sample_every)]
        seen = self.received.setdefault(node.node_id, set())
        call = self.clients[node.node_id].subscribe(topics=sampled)
        ready.set()
        try:
            async for envelope in envelopes_of(call):
                arrived_ns = time.time_ns()
                unsigned = envelopes_pb2.UnsignedOriginatorEnvelope.FromString(
                    envelope.unsigned_originator_envelope
                )
                payer = envelopes_pb2.PayerEnvelope.FromString(unsigned.payer_envelope_bytes)
                client = envelopes_pb2.ClientEnvelope.FromString(payer.unsigned_client_envelope)
                data = client.group_message.v1.data
                at = data.find(MARK) + len(MARK)
                index = int.from_bytes(data[at : at + 8], "big")
                seen.add((unsigned.originator_node_id, index))
                if unsigned.originator_node_id != node.node_id:
                    lag = (arrived_ns - unsigned.originator_ns) / 1e9
                    self.lags.append(lag)
                    if time.perf_counter() >= warmup_until:
                        self.all_lags.append(lag)
        except grpc.aio.AioRpcError as exc:
            if not self.stopping:
                self.error(f"subscribe {exc.code().name}")

    async def churn(self, until: float) -> None:
        """One short subscription per second: open, read the first answer, close."""
        while time.perf_counter() < until:
            node = random.choice(self.nodes)
            call = self.clients[node.node_id].subscribe(
                topics=[topic_of(random.randrange(self.topics))]
            )
            try:
                await asyncio.wait_for(call.read(), 10)
            except (grpc.aio.AioRpcError, TimeoutError) as exc:
                self.error(f"churn {type(exc).__name__}")
            finally:
                call.cancel()
            await asyncio.sleep(1.0)

    def missing(self) -> int:
        """Envelopes of the sampled topics acknowledged but not seen by some subscriber."""
        sent = {(i % len(self.nodes), i) for indexes in self.sampled_sent.values() for i in indexes}
        origin = {n.node_id: k for k, n in enumerate(self.nodes)}
        missing = 0
        for seen in self.received.values():
            got = {(origin[o], i) for o, i in seen}
            missing += len(sent - got)
        return missing


def start_nodes(
    work: Path, cluster: PgCluster
) -> tuple[list[DevNode], list[subprocess.Popen[bytes]]]:
    nodes = plan_nodes(work, cluster, 3, 17000)
    registry = write_registry_file(work, nodes)
    processes = []
    for node in nodes:
        upgrade_to_head(node.dsn)
        env = {
            **os.environ,
            "XNODE_REGISTRY_SOURCE": "file",
            "XNODE_NODES_FILE": str(registry),
            "XNODE_LISTEN_ADDRESS": node.address,
            "XNODE_DATABASE_DSN": node.dsn,
            "XNODE_SIGNER_KEY_FILE": node.key_file,
            "XNODE_METRICS_ADDRESS": "",
            "XNODE_LOG_LEVEL": "warning",
            "XNODE_WORKERS": "1",  # one process: its CPU is what /proc of the pid says
        }
        log = (work / f"node-{node.node_id}.log").open("ab")
        processes.append(
            subprocess.Popen(
                [sys.executable, "-m", "xnode.cli", "run"], env=env, stdout=log, stderr=log
            )
        )
    for node in nodes:
        if not wait_serving(node.address, 120):
            raise SystemExit(f"node {node.node_id} did not start; see {work}")
    return nodes, processes


async def sampler(
    soak: Soak, pids: dict[int, int], started: float, until: float, samples: list[Sample]
) -> None:
    while True:
        await asyncio.sleep(SAMPLE_SECONDS)
        lags, soak.lags = soak.lags, []
        sample = Sample(
            at_s=time.perf_counter() - started,
            rss_mb={n: rss_kb(pid) / 1024 for n, pid in pids.items()},
            lag_p50_s=percentile(lags, 50),
            lag_p99_s=percentile(lags, 99),
            lag_max_s=max(lags, default=0.0),
            published=soak.published,
            queries=soak.queries,
            errors=soak.errors,
            load=os.getloadavg()[0],
        )
        samples.append(sample)
        rss = " ".join(f"{n}:{mb:.0f}MB" for n, mb in sample.rss_mb.items())
        print(
            f"t={sample.at_s:6.0f}s rss {rss} lag p50 {sample.lag_p50_s * 1000:.0f} ms"
            f" p99 {sample.lag_p99_s * 1000:.0f} ms published {sample.published}"
            f" queries {sample.queries} errors {sample.errors} load {sample.load:.2f}",
            flush=True,
        )
        if time.perf_counter() >= until:
            return


# --- the plot: a hand-written SVG (two panels sharing the time axis) ------------------------

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]


def _polyline(points: list[tuple[float, float]], color: str) -> str:
    coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    return f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{coords}"/>'


def _panel(
    top: float,
    title: str,
    unit: str,
    series: dict[str, list[tuple[float, float]]],
    duration: float,
    goal: float | None,
) -> list[str]:
    left, width, height = 70.0, 760.0, 220.0
    peak = max([y for pts in series.values() for _, y in pts] + [goal or 0.0, 1e-9]) * 1.1
    out = [
        f'<text x="{left}" y="{top - 8}" font-size="14">{title}</text>',
        f'<rect x="{left}" y="{top}" width="{width}" height="{height}" fill="none" stroke="#999"/>',
    ]

    def x_of(t: float) -> float:
        return left + width * t / max(duration, 1.0)

    def y_of(v: float) -> float:
        return top + height - height * v / peak

    for k in range(5):
        value = peak * k / 4
        y = y_of(value)
        out.append(
            f'<line x1="{left}" x2="{left + width}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>'
        )
        out.append(
            f'<text x="{left - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end">'
            f"{value:.3g} {unit}</text>"
        )
    for k in range(7):
        t = duration * k / 6
        out.append(
            f'<text x="{x_of(t):.1f}" y="{top + height + 16}" font-size="11" '
            f'text-anchor="middle">{t / 60:.0f} min</text>'
        )
    if goal is not None:
        y = y_of(goal)
        out.append(
            f'<line x1="{left}" x2="{left + width}" y1="{y:.1f}" y2="{y:.1f}" '
            f'stroke="#f90" stroke-dasharray="6,4"/>'
        )
    for i, (name, points) in enumerate(series.items()):
        color = COLORS[i % len(COLORS)]
        out.append(_polyline([(x_of(t), y_of(v)) for t, v in points], color))
        out.append(
            f'<text x="{left + width + 8}" y="{top + 14 + 16 * i}" font-size="12" '
            f'fill="{color}">{name}</text>'
        )
    return out


def write_svg(path: Path, samples: list[Sample], duration: float, caption: str) -> None:
    nodes = list(samples[0].rss_mb) if samples else []
    rss = {f"node {n}": [(s.at_s, s.rss_mb[n]) for s in samples] for n in nodes}
    lag = {
        "lag p99": [(s.at_s, s.lag_p99_s) for s in samples],
        "lag p50": [(s.at_s, s.lag_p50_s) for s in samples],
        "load avg / 10": [(s.at_s, s.load / 10) for s in samples],
    }
    body = [
        '<svg xmlns="http://www.w3.org/2000/svg" width="960" height="620" '
        'font-family="sans-serif">',
        '<rect width="100%" height="100%" fill="white"/>',
        *_panel(40, "Resident memory per node (sampled every 10 s)", "MB", rss, duration, None),
        *_panel(340, "Replication lag, per 10 s window (goal: p99 < 1 s)", "s", lag, duration, 1.0),
        f'<text x="70" y="605" font-size="11">{caption}</text>',
        "</svg>",
    ]
    path.write_text("\n".join(body) + "\n")


def summarize(soak: Soak, samples: list[Sample], warmup_s: float) -> list[str]:
    after = [s for s in samples if s.at_s >= warmup_s] or samples
    lines = ["| measure | result | goal | met? |", "|---|---|---|---|"]
    for node in after[0].rss_mb if after else []:
        values = [s.rss_mb[node] for s in after]
        spread = max(values) / min(values) - 1
        lines.append(
            f"| node {node} RSS after warm-up, min-max | {min(values):.0f}-{max(values):.0f} MB"
            f" ({spread:+.1%}) | flat within 10% | {'yes' if spread <= 0.10 else '**no**'} |"
        )
    p99 = percentile(soak.all_lags, 99)
    lines.append(
        f"| replication lag after warm-up, p50 / p99 / max ({len(soak.all_lags):,} envelopes)"
        f" | {percentile(soak.all_lags, 50) * 1000:.0f} / {p99 * 1000:.0f} /"
        f" {max(soak.all_lags, default=0) * 1000:.0f} ms | p99 < 1 s |"
        f" {'yes' if p99 < 1 else '**no**'} |"
    )
    missing = soak.missing()
    errors = soak.errors + missing
    detail = ", ".join(f"{k}: {v}" for k, v in sorted(soak.error_kinds.items())) or "none"
    lines.append(
        f"| errors (failed requests, broken streams; {missing} sampled envelopes missing)"
        f" | {errors} ({detail}) | 0 | {'yes' if errors == 0 else '**no**'} |"
    )
    loads = [s.load for s in samples]
    lines.append(
        f"| (published {soak.published:,} envelopes, {soak.queries:,} queries; load average"
        f" min/median/max {min(loads):.2f}/{percentile(loads, 50):.2f}/{max(loads):.2f}) | | | |"
    )
    return lines


async def soak_run(args: argparse.Namespace, work: Path, cluster: PgCluster) -> None:
    nodes, processes = await asyncio.to_thread(start_nodes, work, cluster)
    pids = {n.node_id: p.pid for n, p in zip(nodes, processes, strict=True)}
    clients = {n.node_id: NodeClient(n.address) for n in nodes}
    payers = [SigningKey.generate() for _ in range(args.payers)]
    soak = Soak(nodes, clients, args.topics, args.sample, payers)
    samples: list[Sample] = []
    try:
        duration = args.minutes * 60
        started = time.perf_counter()
        until, warmup_until = started + duration, started + args.warmup_minutes * 60
        ready = [asyncio.Event() for _ in nodes]
        subscribers = [
            asyncio.create_task(soak.subscriber(n, r, warmup_until))
            for n, r in zip(nodes, ready, strict=True)
        ]
        await asyncio.gather(*(r.wait() for r in ready))
        print(f"3 nodes {pids}, work dir {work}, load {os.getloadavg()}", flush=True)
        await asyncio.gather(
            soak.publishers(args.rate, until, args.batch_ms / 1000),
            soak.queriers(args.queries, until),
            soak.churn(until),
            sampler(soak, pids, started, until, samples),
        )
        # Let the subscribers receive what was published last.
        deadline = time.perf_counter() + 30
        while soak.missing() and time.perf_counter() < deadline:
            await asyncio.sleep(0.5)
        soak.stopping = True
        for task in subscribers:
            task.cancel()
        await asyncio.gather(*subscribers, return_exceptions=True)
        crashed = [n.node_id for n, p in zip(nodes, processes, strict=True) if p.poll()]
        for node_id in crashed:
            soak.error(f"node {node_id} exited")
        lines = summarize(soak, samples, args.warmup_minutes * 60)
        caption = (
            f"bench/bench_soak.py --minutes {args.minutes:g} --rate {args.rate:g}"
            f" --batch-ms {args.batch_ms:g} --payers {args.payers}: 3 nodes,"
            f" {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, 2 shared vCPUs"
        )
        write_svg(Path(args.svg), samples, duration, caption)
        (work / "samples.json").write_text(json.dumps([s.__dict__ for s in samples]))
        print("\n".join(lines))
        print(f"plot: {args.svg}; samples: {work / 'samples.json'}")
    finally:
        for client in clients.values():
            await client.close()
        for proc in processes:
            proc.terminate()
        for proc in processes:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--warmup-minutes", type=float, default=5.0)
    parser.add_argument("--rate", type=float, default=500.0, help="envelopes/s, all nodes")
    parser.add_argument("--queries", type=float, default=20.0, help="queries/s, all nodes")
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--payers", type=int, default=10, help="payer keys, used in turn")
    parser.add_argument(
        "--batch-ms", type=float, default=20.0, help="per node, send what came due this often"
    )
    parser.add_argument("--sample", type=int, default=10, help="subscribe to every n-th topic")
    parser.add_argument("--svg", default="docs/soak.svg")
    parser.add_argument("--work", help="keep the nodes' state here (default: a temp dir)")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="xnode-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    work.chmod(0o755)
    cluster = start_cluster(work / "pg", fsync=True)
    try:
        uvloop.run(soak_run(args, work, cluster))
    finally:
        cluster.stop()
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
