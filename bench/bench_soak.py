"""Soak benchmark: three replicating nodes under a steady mixed load for a long time, with (in
the long mode) one fault every few minutes; curves sampled every 10 s and plotted as SVG.

    .venv/bin/python bench/bench_soak.py [--minutes 30] [--rate 500] [--warmup-minutes 5]
        [--svg docs/soak.svg] [--work DIR]
    .venv/bin/python bench/bench_soak.py --hours 24 --rate 60 --fault-every-minutes 5 \
        --svg docs/soak-faults.svg          # the long mode: faults, a gateway, more curves

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

The long mode (`--fault-every-minutes N`, N > 0) adds:
- faults, one every N minutes, in turn: kill -9 of node 300 (started again 5 s later), SIGSTOP
  of a node for 15 s, a partition of one node from the others for 20 s (every peer link goes
  through a TCP proxy in this process, tests/support/tcp_link.py), a restart of Postgres
  (every node's database at once); the nodes that are stopped or cut rotate, node 300 alone
  is killed, so the RSS curves of 100 and 200 span the whole run;
- a gateway (`xnode gateway`) with a subscriber of its own, failing over between nodes;
- subscribers that resume from their cursor when a fault ends their stream, every call
  recorded and judged at the end by the subscription checker (tests/support/subscriber_history.py):
  every acknowledged envelope of the sampled topics exactly once per subscriber, in each
  originator's order;
- curves of publish latency, replication lag, RSS per process (nodes, gateway; for Postgres
  the PSS of its processes, shared buffers once), table and index bytes per live row and dead
  tuples (bloat), WAL size, and open Postgres connections, and their drift per hour after the
  warm-up (least-squares slope);
- at the end: misbehavior reports held by any node (goal: none, nobody misbehaved).
The machine is shared: the load average is sampled beside every point.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import grpc
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests' helpers

from tests.support.statuses import trailers
from tests.support.subscriber_history import Call, History, check
from tests.support.tcp_link import Link
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.api.errors import CURSOR_TRAILER
from xnode.client.node import NodeClient, envelopes_of, group_message_envelope
from xnode.core.crypto import SigningKey
from xnode.core.cursors import Cursor
from xnode.core.envelopes import build_payer_envelope, cursor_from_proto
from xnode.core.registry import NodeEntry, Registry
from xnode.devtools.devgateway import spawn_gateway
from xnode.devtools.devnet import DevNode, load_key, plan_nodes, wait_serving, write_registry_file
from xnode.devtools.postgres import PgCluster, as_server_user, free_port, start_cluster
from xnode.devtools.processes import child_pids
from xnode.store.migrate import upgrade_to_head

SAMPLE_SECONDS = 10.0
PAYLOAD_BYTES = 200
# Publishes awaiting an answer at most; beyond it a send is shed and counted as an error (an
# open-loop generator on a starved machine would otherwise queue without bound).
MAX_IN_FLIGHT = 1000
MARK = b"soak-index:"  # before the index in each payload (the node frames it as MLS)
KILLED = 300  # the node kill -9 hits (the others' RSS curves span the run)
STOP_S, PARTITION_S, RESTART_AFTER_S = 15.0, 20.0, 5.0
# After a fault ends, errors are still its own for this long (publishes that waited on a
# stopped node time out, a restarted node's first answers, a stream's next resume).
FAULT_GRACE_S = 30.0


def group_of(topic_index: int) -> bytes:
    return topic_index.to_bytes(16, "big")


def topic_of(topic_index: int) -> bytes:
    return b"\x00" + group_of(topic_index)


def rss_kb(pid: int) -> int:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:  # gone (killed, restarting)
        return 0
    for line in lines:
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def pss_kb(pid: int) -> int:
    """Proportional set size: shared pages split among their users (Postgres' processes
    share its buffers; their RSS would count them once each)."""
    try:
        lines = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0


def percentile(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) points, per hour."""
    if len(points) < 2:
        return 0.0
    mean_t = sum(t for t, _ in points) / len(points)
    mean_v = sum(v for _, v in points) / len(points)
    spread = sum((t - mean_t) ** 2 for t, _ in points)
    if spread == 0:
        return 0.0
    return sum((t - mean_t) * (v - mean_v) for t, v in points) / spread * 3600


@dataclass
class Sample:
    at_s: float
    rss_mb: dict[str, float]
    lag_p50_s: float
    lag_p99_s: float
    lag_max_s: float
    published: int
    queries: int
    errors: int
    load: float
    publish_p50_s: float = 0.0
    publish_p99_s: float = 0.0
    # The long mode's Postgres figures (absent when Postgres did not answer).
    db: dict[str, float] = field(default_factory=dict)


@dataclass
class Soak:
    nodes: list[DevNode]
    clients: dict[int, NodeClient]
    topics: int
    sample_every: int
    payers: list[SigningKey] = field(default_factory=lambda: [SigningKey.generate()])
    deadline_s: float = 30.0
    resume: bool = False  # subscribers resume from their cursor when their stream ends
    published: int = 0
    queries: int = 0
    errors: int = 0
    error_kinds: dict[str, int] = field(default_factory=dict)
    lags: list[float] = field(default_factory=list)  # since the last sample
    all_lags: list[float] = field(default_factory=list)  # after the warm-up
    publish_s: list[float] = field(default_factory=list)  # since the last sample
    sampled_sent: dict[int, set[int]] = field(default_factory=dict)  # topic -> payload indexes
    received: dict[str, set[tuple[int, int]]] = field(default_factory=dict)  # subscriber -> seen
    acknowledged: dict[tuple[int, int], bytes] = field(default_factory=dict)  # sampled topics
    histories: list[History] = field(default_factory=list)
    stopping: bool = False
    in_flight: int = 0  # envelopes sent and not yet answered
    # The long mode: until when a fault's effects may show (its end and a grace after), and
    # the errors that came outside every such window (goal: none).
    faulted_until: float = 0.0
    errors_outside_faults: dict[str, int] = field(default_factory=dict)

    def error(self, kind: str) -> None:
        self.errors += 1
        self.error_kinds[kind] = self.error_kinds.get(kind, 0) + 1
        if time.perf_counter() > self.faulted_until:
            self.errors_outside_faults[kind] = self.errors_outside_faults.get(kind, 0) + 1

    def envelope(self, node: DevNode, index: int) -> envelopes_pb2.PayerEnvelope:
        data = MARK + index.to_bytes(8, "big") + os.urandom(PAYLOAD_BYTES - 8 - len(MARK))
        payer = self.payers[index % len(self.payers)]
        client = group_message_envelope(group_of(index % self.topics), data)
        return build_payer_envelope(client, payer, node.node_id)

    async def publish_some(self, node: DevNode, indexes: list[int]) -> None:
        envelopes = [self.envelope(node, i) for i in indexes]
        began = time.perf_counter()
        try:
            answered = await self.clients[node.node_id].publish(envelopes, self.deadline_s)
        except grpc.aio.AioRpcError as exc:
            for _ in indexes:
                self.error(f"publish {exc.code().name}")
            return
        finally:
            self.in_flight -= len(indexes)
        self.publish_s.append(time.perf_counter() - began)
        self.published += len(indexes)
        for index, envelope in zip(indexes, answered, strict=True):
            topic = index % self.topics
            if topic % self.sample_every == 0:
                self.sampled_sent.setdefault(topic, set()).add(index)
                unsigned = envelopes_pb2.UnsignedOriginatorEnvelope.FromString(
                    envelope.unsigned_originator_envelope
                )
                key = (unsigned.originator_node_id, unsigned.originator_sequence_id)
                self.acknowledged[key] = topic_of(topic)

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

    async def subscriber(
        self,
        name: str,
        client: NodeClient,
        own: int | None,
        ready: asyncio.Event,
        warmup_until: float,
    ) -> None:
        """Follows the sampled topics; `own` (a node id) is not timed for the lag. In the
        long mode it resumes from its cursor (or the one its ending status names) whenever
        its stream ends, every call recorded for the checker."""
        sampled = [topic_of(t) for t in range(0, self.topics, self.sample_every)]
        seen = self.received.setdefault(name, set())
        history = History(name, frozenset(sampled))
        self.histories.append(history)
        tops: dict[int, int] = {}
        while not self.stopping:
            record = history.open({t: tops for t in sampled})
            call = client.subscribe(topics=sampled, cursor=Cursor(tops))
            ready.set()
            try:
                async for envelope in envelopes_of(call):
                    self._arrived(envelope, own, seen, tops, record, warmup_until)
                return  # the stream ended without a status: only when stopping
            except grpc.aio.AioRpcError as exc:
                if self.stopping:
                    return
                self.error(f"subscribe {exc.code().name}")
                named = _resume_cursor(exc)
                record.end(exc.code().name, None if named is None else {t: named for t in sampled})
                if not self.resume:
                    return
                if named is not None:
                    tops = dict(named)
                await asyncio.sleep(1.0)

    def _arrived(
        self,
        envelope: envelopes_pb2.OriginatorEnvelope,
        own: int | None,
        seen: set[tuple[int, int]],
        tops: dict[int, int],
        record: Call,
        warmup_until: float,
    ) -> None:
        arrived_ns = time.time_ns()
        unsigned = envelopes_pb2.UnsignedOriginatorEnvelope.FromString(
            envelope.unsigned_originator_envelope
        )
        payer = envelopes_pb2.PayerEnvelope.FromString(unsigned.payer_envelope_bytes)
        client = envelopes_pb2.ClientEnvelope.FromString(payer.unsigned_client_envelope)
        data = client.group_message.v1.data
        at = data.find(MARK) + len(MARK)
        index = int.from_bytes(data[at : at + 8], "big")
        originator, sequence_id = unsigned.originator_node_id, unsigned.originator_sequence_id
        seen.add((originator, index))
        record.receive(client.aad.target_topic, originator, sequence_id)
        tops[originator] = max(tops.get(originator, 0), sequence_id)
        if originator != own:
            lag = (arrived_ns - unsigned.originator_ns) / 1e9
            self.lags.append(lag)
            if time.perf_counter() >= warmup_until:
                self.all_lags.append(lag)

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


def _resume_cursor(exc: grpc.aio.AioRpcError) -> dict[int, int] | None:
    """The cursor a node's ending status names (the xnode-cursor-bin trailer), if any."""
    value = trailers(exc).get(CURSOR_TRAILER)
    if not isinstance(value, bytes):
        return None
    cursor = cursor_from_proto(envelopes_pb2.Cursor.FromString(value), "trailer")
    return {o: s for o, s in cursor.to_dict().items() if s}


# --- the processes: nodes (each peer link through a proxy in the long mode), a gateway ------


@dataclass
class Processes:
    work: Path
    cluster: PgCluster
    nodes: list[DevNode]
    envs: dict[int, dict[str, str]]
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    links: dict[tuple[int, int], Link] = field(default_factory=dict)  # (from, to)

    def spawn(self, node: DevNode) -> None:
        log = (self.work / f"node-{node.node_id}.log").open("ab")
        self.procs[f"node {node.node_id}"] = subprocess.Popen(
            [sys.executable, "-m", "xnode.cli", "run"],
            env=self.envs[node.node_id],
            stdout=log,
            stderr=log,
        )

    def pids(self) -> dict[str, int]:
        pids = {name: p.pid for name, p in self.procs.items() if p.poll() is None}
        pids["postgres"] = _postmaster_pid(self.cluster)
        return pids

    def rss_mb(self) -> dict[str, float]:
        rss = {}
        for name, pid in self.pids().items():
            if name == "postgres":  # the postmaster and its backends, shared buffers once
                rss[name] = sum(pss_kb(p) for p in [pid, *child_pids(pid)]) / 1024
            else:
                rss[name] = rss_kb(pid) / 1024
        return rss

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)  # a stopped one must wake to stop
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def _postmaster_pid(cluster: PgCluster) -> int:
    try:
        return int((cluster.data_dir / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


async def start_processes(
    work: Path, cluster: PgCluster, proxied: bool, gateway: bool
) -> Processes:
    nodes = plan_nodes(work, cluster, 3, 17000)
    registry = write_registry_file(work, nodes)
    links: dict[tuple[int, int], Link] = {}
    if proxied:  # node a reaches node b through links[(a, b)]
        for a in nodes:
            for b in nodes:
                if a is not b:
                    link = Link()
                    await link.start()
                    link.upstream = b.address
                    links[(a.node_id, b.node_id)] = link
    envs = {}
    for node in nodes:
        await asyncio.to_thread(upgrade_to_head, node.dsn)
        nodes_file = registry
        if proxied:
            entries = [
                NodeEntry(
                    b.node_id,
                    bytes.fromhex(b.public_key[2:]),
                    b.url if b is node else f"http://{links[(node.node_id, b.node_id)].address}",
                )
                for b in nodes
            ]
            nodes_file = work / f"nodes-{node.node_id}.json"
            nodes_file.write_text(Registry(entries).to_json())
        envs[node.node_id] = {
            **os.environ,
            "XNODE_REGISTRY_SOURCE": "file",
            "XNODE_NODES_FILE": str(nodes_file),
            "XNODE_LISTEN_ADDRESS": node.address,
            "XNODE_DATABASE_DSN": node.dsn,
            "XNODE_SIGNER_KEY_FILE": node.key_file,
            "XNODE_METRICS_ADDRESS": "",
            "XNODE_LOG_LEVEL": "warning",
            "XNODE_WORKERS": "1",  # one process: its CPU is what /proc of the pid says
        }
    processes = Processes(work, cluster, nodes, envs, links=links)
    for node in nodes:
        processes.spawn(node)
    for node in nodes:
        if not await asyncio.to_thread(wait_serving, node.address, 120):
            raise SystemExit(f"node {node.node_id} did not start; see {work}")
    if gateway:
        address = f"127.0.0.1:{free_port()}"
        key_file = work / "gateway.key"
        load_key(key_file)
        registry_env = {"XNODE_REGISTRY_SOURCE": "file", "XNODE_NODES_FILE": str(registry)}
        processes.procs["gateway"] = spawn_gateway(work, address, key_file, registry_env)
        processes.envs[0] = {"address": address}
        if not await asyncio.to_thread(wait_serving, address, 120):
            raise SystemExit(f"the gateway did not start; see {work}")
    return processes


# --- the fault battery ---------------------------------------------------------------------


@dataclass
class Fault:
    at_s: float
    what: str


async def _restart_node(processes: Processes, node: DevNode) -> None:
    await asyncio.sleep(RESTART_AFTER_S)
    processes.spawn(node)
    await asyncio.to_thread(wait_serving, node.address, 120)


async def kill_9(processes: Processes, turn: int) -> str:
    node = next(n for n in processes.nodes if n.node_id == KILLED)
    processes.procs[f"node {KILLED}"].kill()
    processes.procs[f"node {KILLED}"].wait(30)
    await _restart_node(processes, node)
    return f"kill -9 node {KILLED}"


async def sigstop(processes: Processes, turn: int) -> str:
    node = processes.nodes[turn % len(processes.nodes)]
    proc = processes.procs[f"node {node.node_id}"]
    proc.send_signal(signal.SIGSTOP)
    await asyncio.sleep(STOP_S)
    proc.send_signal(signal.SIGCONT)
    return f"SIGSTOP node {node.node_id} {STOP_S:g} s"


async def partition(processes: Processes, turn: int) -> str:
    cut = processes.nodes[turn % len(processes.nodes)].node_id
    links = [link for (a, b), link in processes.links.items() if cut in (a, b)]
    for link in links:
        link.set_cut(True)
    await asyncio.sleep(PARTITION_S)
    for link in links:
        link.set_cut(False)
    return f"partition node {cut} {PARTITION_S:g} s"


async def postgres_restart(processes: Processes, turn: int) -> str:
    data_dir = processes.cluster.data_dir
    log = str(data_dir / "server.log")  # else the server keeps our pipe open
    command = ["pg_ctl", "-D", str(data_dir), "-l", log, "-m", "fast", "-w", "restart"]
    await asyncio.to_thread(
        subprocess.run, as_server_user(command), capture_output=True, check=True
    )
    return "Postgres restart"


BATTERY: dict[str, Callable[[Processes, int], Awaitable[str]]] = {
    "kill": kill_9,
    "stop": sigstop,
    "partition": partition,
    "postgres": postgres_restart,
}


async def fault_battery(
    soak: Soak,
    processes: Processes,
    every_s: float,
    until: float,
    started: float,
    faults: list[Fault],
    battery: list[str],
) -> None:
    turn = 0
    while time.perf_counter() + every_s < until:
        await asyncio.sleep(every_s)
        play = BATTERY[battery[turn % len(battery)]]
        at = time.perf_counter() - started
        soak.faulted_until = math.inf
        try:
            what = await play(processes, turn // len(battery))
        except Exception as exc:  # a fault that failed to play is a finding, not a crash
            what = f"{play.__name__} failed: {exc!r}"
        soak.faulted_until = time.perf_counter() + FAULT_GRACE_S
        faults.append(Fault(at, what))
        print(f"t={at:6.0f}s fault: {what}", flush=True)
        turn += 1


# --- sampling ------------------------------------------------------------------------------


async def postgres_figures(cluster: PgCluster, nodes: list[DevNode]) -> dict[str, float]:
    """WAL size, connections, and table/index bytes per live row and dead tuples (bloat)
    summed over the nodes' databases; empty when Postgres does not answer."""
    try:
        conn = await asyncpg.connect(cluster.dsn(), timeout=5)
        try:
            wal = await conn.fetchval("SELECT coalesce(sum(size), 0) FROM pg_ls_waldir()")
            backends = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
            )
        finally:
            await conn.close()
        live = dead = table = index = 0
        for node in nodes:
            conn = await asyncpg.connect(node.dsn, timeout=5)
            try:
                row = await conn.fetchrow(
                    "SELECT sum(n_live_tup), sum(n_dead_tup), sum(pg_table_size(relid)),"
                    " sum(pg_indexes_size(relid)) FROM pg_stat_user_tables"
                )
            finally:
                await conn.close()
            assert row is not None  # sums over no rows are one row of NULLs
            live, dead = live + int(row[0] or 0), dead + int(row[1] or 0)
            table, index = table + int(row[2] or 0), index + int(row[3] or 0)
    except (OSError, asyncpg.PostgresError, TimeoutError):
        return {}
    return {
        "wal_mb": float(wal) / 2**20,
        "connections": float(backends),
        "table_bytes_per_row": table / max(live, 1),
        "index_bytes_per_row": index / max(live, 1),
        "dead_pct": 100 * dead / max(live + dead, 1),
    }


async def sampler(
    soak: Soak,
    processes: Processes,
    started: float,
    until: float,
    samples: list[Sample],
    long_mode: bool,
) -> None:
    while True:
        await asyncio.sleep(SAMPLE_SECONDS)
        lags, soak.lags = soak.lags, []
        publish_s, soak.publish_s = soak.publish_s, []
        db = await postgres_figures(processes.cluster, processes.nodes) if long_mode else {}
        rss = processes.rss_mb()
        if not long_mode:
            rss = {k: v for k, v in rss.items() if k.startswith("node")}
        sample = Sample(
            at_s=time.perf_counter() - started,
            rss_mb=rss,
            lag_p50_s=percentile(lags, 50),
            lag_p99_s=percentile(lags, 99),
            lag_max_s=max(lags, default=0.0),
            published=soak.published,
            queries=soak.queries,
            errors=soak.errors,
            load=os.getloadavg()[0],
            publish_p50_s=percentile(publish_s, 50),
            publish_p99_s=percentile(publish_s, 99),
            db=db,
        )
        samples.append(sample)
        shown = " ".join(f"{n.removeprefix('node ')}:{mb:.0f}MB" for n, mb in rss.items())
        extra = " ".join(f"{k} {v:.3g}" for k, v in db.items())
        print(
            f"t={sample.at_s:6.0f}s rss {shown} lag p50 {sample.lag_p50_s * 1000:.0f} ms"
            f" p99 {sample.lag_p99_s * 1000:.0f} ms publish p99"
            f" {sample.publish_p99_s * 1000:.0f} ms published {sample.published}"
            f" queries {sample.queries} errors {sample.errors} load {sample.load:.2f} {extra}",
            flush=True,
        )
        if time.perf_counter() >= until:
            return


# --- the plot: a hand-written SVG (panels sharing the time axis) ----------------------------

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"]
Series = dict[str, list[tuple[float, float]]]


def _polyline(points: list[tuple[float, float]], color: str) -> str:
    coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    return f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{coords}"/>'


@dataclass
class Panel:
    title: str
    unit: str
    series: Series
    goal: float | None = None


def _time_label(t: float, duration: float) -> str:
    return f"{t / 3600:.1f} h" if duration >= 3 * 3600 else f"{t / 60:.0f} min"


def _panel(top: float, panel: Panel, duration: float, marks: list[tuple[float, str]]) -> list[str]:
    left, width, height = 70.0, 760.0, 220.0
    values = [y for pts in panel.series.values() for _, y in pts]
    peak = max([*values, panel.goal or 0.0, 1e-9]) * 1.1
    out = [
        f'<text x="{left}" y="{top - 8}" font-size="14">{panel.title}</text>',
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
            f"{value:.3g} {panel.unit}</text>"
        )
    for k in range(7):
        t = duration * k / 6
        out.append(
            f'<text x="{x_of(t):.1f}" y="{top + height + 16}" font-size="11" '
            f'text-anchor="middle">{_time_label(t, duration)}</text>'
        )
    for at, letter in marks:  # the faults
        x = x_of(at)
        out.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + height}" stroke="#bbb" '
            f'stroke-dasharray="2,3"/>'
        )
        out.append(
            f'<text x="{x:.1f}" y="{top + 10}" font-size="9" fill="#888" '
            f'text-anchor="middle">{letter}</text>'
        )
    if panel.goal is not None:
        y = y_of(panel.goal)
        out.append(
            f'<line x1="{left}" x2="{left + width}" y1="{y:.1f}" y2="{y:.1f}" '
            f'stroke="#f90" stroke-dasharray="6,4"/>'
        )
    for i, (name, points) in enumerate(panel.series.items()):
        color = COLORS[i % len(COLORS)]
        out.append(_polyline([(x_of(t), y_of(v)) for t, v in points], color))
        out.append(
            f'<text x="{left + width + 8}" y="{top + 14 + 16 * i}" font-size="12" '
            f'fill="{color}">{name}</text>'
        )
    return out


def svg_of(
    panels: list[Panel], duration: float, caption: str, marks: list[tuple[float, str]]
) -> str:
    height = 40 + 300 * len(panels)
    body = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="960" height="{height}" '
        'font-family="sans-serif">',
        '<rect width="100%" height="100%" fill="white"/>',
    ]
    for i, panel in enumerate(panels):
        body += _panel(40 + 300 * i, panel, duration, marks)
    body += [f'<text x="70" y="{height - 15}" font-size="11">{caption}</text>', "</svg>"]
    return "\n".join(body) + "\n"


def rss_series(samples: list[Sample]) -> Series:
    names = sorted({n for s in samples for n in s.rss_mb})
    return {n: [(s.at_s, s.rss_mb[n]) for s in samples if s.rss_mb.get(n)] for n in names}


def db_series(samples: list[Sample], *keys: str) -> Series:
    return {k.replace("_", " "): [(s.at_s, s.db[k]) for s in samples if k in s.db] for k in keys}


def panels_of(samples: list[Sample], long_mode: bool) -> list[Panel]:
    lag = {
        "lag p99": [(s.at_s, s.lag_p99_s) for s in samples],
        "lag p50": [(s.at_s, s.lag_p50_s) for s in samples],
        "load avg / 10": [(s.at_s, s.load / 10) for s in samples],
    }
    panels = [
        Panel(
            "Resident memory per process (Postgres: PSS of all its processes)",
            "MB",
            rss_series(samples),
        ),
        Panel("Replication lag, per 10 s window (goal: p99 < 1 s)", "s", lag, 1.0),
    ]
    if long_mode:
        publish = {
            "publish p99": [(s.at_s, s.publish_p99_s) for s in samples],
            "publish p50": [(s.at_s, s.publish_p50_s) for s in samples],
        }
        panels += [
            Panel("Publish latency, per 10 s window", "s", publish),
            Panel(
                "Bytes per live row, all nodes' tables (bloat)",
                "B",
                db_series(samples, "table_bytes_per_row", "index_bytes_per_row"),
            ),
            Panel("WAL size, and dead tuples", "", db_series(samples, "wal_mb", "dead_pct")),
            Panel("Open Postgres connections", "", db_series(samples, "connections")),
        ]
    return panels


def curves(samples: list[Sample]) -> Series:
    """Every curve, by name, for the slopes."""
    out: Series = {f"RSS {n} (MB)": pts for n, pts in rss_series(samples).items()}
    out["replication lag p50 (s)"] = [(s.at_s, s.lag_p50_s) for s in samples]
    out["replication lag p99 (s)"] = [(s.at_s, s.lag_p99_s) for s in samples]
    out["publish latency p50 (s)"] = [(s.at_s, s.publish_p50_s) for s in samples]
    out["publish latency p99 (s)"] = [(s.at_s, s.publish_p99_s) for s in samples]
    units = {
        "table_bytes_per_row": "B",
        "index_bytes_per_row": "B",
        "dead_pct": "%",
        "wal_mb": "MB",
        "connections": "",
    }
    for key, unit in units.items():
        label = key.replace("_", " ") + (f" ({unit})" if unit else "")
        out[label] = db_series(samples, key)[key.replace("_", " ")]
    return out


def drift_table(samples: list[Sample], warmup_s: float) -> list[str]:
    """Each curve's mean and least-squares slope per hour after the warm-up."""
    lines = ["| curve (after warm-up) | mean | drift per hour | drift per hour, % of mean |"]
    lines.append("|---|---|---|---|")
    for name, points in curves(samples).items():
        after = [(t, v) for t, v in points if t >= warmup_s and not math.isnan(v)]
        if not after:
            continue
        mean = sum(v for _, v in after) / len(after)
        slope = slope_per_hour(after)
        share = f"{100 * slope / mean:+.1f}%" if mean else "-"
        lines.append(f"| {name} | {mean:.4g} | {slope:+.3g} | {share} |")
    return lines


def summarize(soak: Soak, samples: list[Sample], warmup_s: float) -> list[str]:
    after = [s for s in samples if s.at_s >= warmup_s] or samples
    lines = ["| measure | result | goal | met? |", "|---|---|---|---|"]
    for name in sorted(after[0].rss_mb) if after else []:
        values = [s.rss_mb[name] for s in after if s.rss_mb.get(name)]
        if not values or not name.startswith("node"):
            continue
        spread = max(values) / min(values) - 1
        lines.append(
            f"| {name} RSS after warm-up, min-max | {min(values):.0f}-{max(values):.0f} MB"
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


async def misbehavior_reports(nodes: list[DevNode]) -> str:
    """The reports the nodes hold, by type and node reported. A node cut off or stopped by a
    fault is unresponsive to its peers (and they to it, seen from its side of a partition):
    UNRESPONSIVE_NODE reports are what the XIP asks for then; any other is a finding."""
    held: dict[tuple[int, int], int] = {}
    for node in nodes:
        conn = await asyncpg.connect(node.dsn, timeout=10)
        try:
            rows = await conn.fetch(
                "SELECT type, misbehaving_node_id, count(*) FROM misbehavior_reports GROUP BY 1, 2"
            )
        finally:
            await conn.close()
        for kind, against, count in rows:
            held[(kind, against)] = held.get((kind, against), 0) + count
    if not held:
        return "none"
    return ", ".join(
        f"{mb.Misbehavior.Name(mb.Misbehavior.ValueType(kind)).removeprefix('MISBEHAVIOR_')} "
        f"against {against}: {n}"
        for (kind, against), n in sorted(held.items())
    )


async def soak_run(args: argparse.Namespace, work: Path, cluster: PgCluster) -> None:
    long_mode = args.fault_every_minutes > 0
    processes = await start_processes(work, cluster, proxied=long_mode, gateway=long_mode)
    nodes = processes.nodes
    clients = {n.node_id: NodeClient(n.address) for n in nodes}
    payers = [SigningKey.generate() for _ in range(args.payers)]
    soak = Soak(nodes, clients, args.topics, args.sample, payers)
    if long_mode:
        soak.deadline_s, soak.resume = 10.0, True
    readers: list[tuple[str, NodeClient, int | None]] = [
        (f"node {n.node_id}", clients[n.node_id], n.node_id) for n in nodes
    ]
    gateway_client = None
    if long_mode:
        gateway_client = NodeClient(processes.envs[0]["address"])
        readers.append(("gateway", gateway_client, None))
    samples: list[Sample] = []
    faults: list[Fault] = []
    try:
        duration = args.minutes * 60
        started = time.perf_counter()
        until, warmup_until = started + duration, started + args.warmup_minutes * 60
        ready = [asyncio.Event() for _ in readers]
        subscribers = [
            asyncio.create_task(soak.subscriber(name, client, own, r, warmup_until))
            for (name, client, own), r in zip(readers, ready, strict=True)
        ]
        await asyncio.gather(*(r.wait() for r in ready))
        print(f"processes {processes.pids()}, work dir {work}, load {os.getloadavg()}", flush=True)
        loads = [
            soak.publishers(args.rate, until, args.batch_ms / 1000),
            soak.queriers(args.queries, until),
            soak.churn(until),
            sampler(soak, processes, started, until, samples, long_mode),
        ]
        if long_mode:
            every_s = args.fault_every_minutes * 60
            battery = args.faults.split(",")
            loads.append(fault_battery(soak, processes, every_s, until, started, faults, battery))
        await asyncio.gather(*loads)
        # Let the subscribers receive what was published last.
        deadline = time.perf_counter() + (120 if long_mode else 30)
        while soak.missing() and time.perf_counter() < deadline:
            await asyncio.sleep(0.5)
        soak.stopping = True
        for task in subscribers:
            task.cancel()
        await asyncio.gather(*subscribers, return_exceptions=True)
        for name, proc in processes.procs.items():
            if proc.poll() is not None:
                soak.error(f"{name} exited")
        lines = summarize(soak, samples, args.warmup_minutes * 60)
        if long_mode:
            verdict = check(soak.histories, soak.acknowledged)
            reports = await misbehavior_reports(nodes)
            lines += [
                "",
                f"subscribers ({len(soak.histories)}): {verdict.summary()}",
                f"faults: {len(faults)} ({', '.join(f.what for f in faults) or 'none'})",
                f"misbehavior reports held by the nodes: {reports}"
                " (goal: none but UNRESPONSIVE_NODE while a fault lasts)",
                "errors outside the faults (and 30 s after each): "
                + (
                    ", ".join(f"{k}: {v}" for k, v in sorted(soak.errors_outside_faults.items()))
                    or "none"
                ),
                "",
                *drift_table(samples, args.warmup_minutes * 60),
            ]
        hours = duration / 3600
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        caption = (
            f"bench/bench_soak.py --minutes {args.minutes:g} --rate {args.rate:g}"
            f" --batch-ms {args.batch_ms:g} --payers {args.payers}: 3 nodes, {when},"
            " 2 shared vCPUs"
        )
        if long_mode:
            caption = (
                f"bench/bench_soak.py --minutes {args.minutes:g} --rate {args.rate:g}"
                f" --fault-every-minutes {args.fault_every_minutes:g}: 3 nodes, {hours:.2g} h,"
                f" {len(faults)} faults (dotted: k kill -9, s SIGSTOP, p partition,"
                f" r Postgres restart), {when}, 2 shared vCPUs"
            )
        marks = [(f.at_s, _letter(f.what)) for f in faults]
        svg = svg_of(panels_of(samples, long_mode), duration, caption, marks)
        Path(args.svg).write_text(svg)
        (work / "samples.json").write_text(json.dumps([s.__dict__ for s in samples]))
        (work / "faults.json").write_text(json.dumps([f.__dict__ for f in faults]))
        print("\n".join(lines))
        print(f"plot: {args.svg}; samples: {work / 'samples.json'}")
    finally:
        for client in clients.values():
            await client.close()
        if gateway_client is not None:
            await gateway_client.close()
        processes.stop()
        for link in processes.links.values():
            await link.stop()


def _letter(what: str) -> str:
    return {"kill": "k", "SIGS": "s", "part": "p", "Post": "r"}.get(what[:4], "?")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--hours", type=float, help="instead of --minutes")
    parser.add_argument("--warmup-minutes", type=float, default=5.0)
    parser.add_argument("--rate", type=float, default=500.0, help="envelopes/s, all nodes")
    parser.add_argument("--queries", type=float, default=20.0, help="queries/s, all nodes")
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--payers", type=int, default=10, help="payer keys, used in turn")
    parser.add_argument(
        "--batch-ms", type=float, default=20.0, help="per node, send what came due this often"
    )
    parser.add_argument("--sample", type=int, default=10, help="subscribe to every n-th topic")
    parser.add_argument(
        "--fault-every-minutes",
        type=float,
        default=0.0,
        help="the long mode: one fault this often, a gateway, more curves (0: none)",
    )
    parser.add_argument(
        "--faults",
        default=",".join(BATTERY),
        help=f"the faults played in turn, of {', '.join(BATTERY)}",
    )
    parser.add_argument("--svg", default="docs/soak.svg")
    parser.add_argument("--work", help="keep the nodes' state here (default: a temp dir)")
    args = parser.parse_args()
    unknown = set(args.faults.split(",")) - set(BATTERY)
    if unknown:
        parser.error(f"unknown faults {sorted(unknown)}: choose among {', '.join(BATTERY)}")
    if args.hours is not None:
        args.minutes = args.hours * 60
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
