"""The node's own cost per call: its empty call (`grpc.health.v1.Health/Check`) beside a bare
grpc.aio health server in the same run, one process each under uvloop (the node's event
loop), with h2load (Debian's nghttp2-client) as the load; then single publishes, each with a
payer envelope of its own (bench/grpc_bodies_load.mjs: a repeated one would be answered from
the store as a replay, storing nothing).

    .venv/bin/python bench/bench_percall.py [--rounds 3] [--calls 20000] [--singles 5000]

What each part costs: the node is also started with one part taken out at a time by a
bench-only hook (the launcher below patches the part away before `xnode run` starts; the
node's code has no switch for it), and each variant's empty calls are compared with the bare
server's of the same round. Each variant's idle CPU (no calls, 3 s) shows what its background
tasks cost. Variants take turns in every round, so the noise of a shared machine falls on all
of them; every figure is a ratio to the bare server of its own round, and the median of the
rounds is printed beside its goal:

- the node's empty call at >= 0.85 of the bare server's;
- single publishes at >= 0.4 of the bare server's empty call.

Starts its own Postgres cluster (fsync on: publishes are answered once durable). The node
runs one worker, a file registry of itself, no chain, no metrics listener, the limits on
(checked on every call) but never reached.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_cores import (
    HEALTH,
    PUBLISH,
    SINGLES_IN_FLIGHT,
    NodeRun,
    bodies_load,
    cpu_seconds,
    grpc_frame,
    h2load,
    load,
    require_h2load,
    require_node,
    start_node,
    write_publishes,
)

from xnode.core.crypto import SigningKey
from xnode.devtools.devnet import wait_serving
from xnode.devtools.postgres import free_port, start_cluster

EMPTY_IN_FLIGHT = (4, 4)  # 4 connections, 16 calls in flight
IDLE_S = 5.0
CHUNKS = 4  # turns each server's calls of a round are split into
GOAL_EMPTY = 0.85  # the node's empty calls / the bare server's
GOAL_SINGLES = 0.4  # single publishes / the bare server's empty calls


# --- what runs in the measured processes ---------------------------------------------------


def serve_bare(address: str) -> None:
    """The bare server: grpc.aio with grpc_health's asyncio health servicer (Check on the
    event loop, as grpc.aio serves best), nothing else."""
    import grpc
    import uvloop
    from grpc_health.v1 import _async, health_pb2_grpc  # _async is health.aio

    async def serve() -> None:
        server = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(_async.HealthServicer(), server)
        server.add_insecure_port(address)
        await server.start()
        await server.wait_for_termination()

    uvloop.run(serve())


def _without_interceptor() -> None:
    """The node's gRPC server made with no interceptors (the gateway's too, unused here)."""
    import grpc

    made = grpc.aio.server

    def server(*args: Any, **kwargs: Any) -> grpc.aio.Server:
        return made(*args, **{**kwargs, "interceptors": None})

    _replace(grpc.aio, ("server",), server)


async def _nothing(*_: object) -> None:
    return None


async def _forever(*_: object) -> None:
    await asyncio.Event().wait()  # until cancelled, as the loop it stands for


def _replace(owner: object, names: tuple[str, ...], by: Callable[..., Any]) -> None:
    for name in names:
        setattr(owner, name, by)


def _without_health_monitor() -> None:
    """Every health status stays what the servicer starts with ("" SERVING)."""
    from xnode.usecases.health import HealthMonitor

    _replace(HealthMonitor, ("start", "stop"), _nothing)


def _without_scrub() -> None:
    from xnode.replication.scrub import Scrub

    _replace(Scrub, ("_run",), _forever)


# Variant name -> the hook that takes its part away in the node's process before it starts.
HOOKS: dict[str, Callable[[], None]] = {
    "node": lambda: None,
    "node without its interceptor (NodeAuthInterceptor)": _without_interceptor,
    "node without its health monitor": _without_health_monitor,
    "node without its scrub": _without_scrub,
}


def serve_node(variant: str) -> None:
    from xnode.cli import main as xnode_main

    HOOKS[variant]()
    sys.exit(xnode_main(["run"]))


# --- the run --------------------------------------------------------------------------------


@dataclass
class Server:
    """A measured process: the bare server or a node variant."""

    name: str
    address: str
    pid: int
    empty: list[float] = field(default_factory=list)  # calls/s, one per round
    cpu_us: list[float] = field(default_factory=list)  # its CPU per empty call, per round
    idle: float = 0.0  # its share of a core with no calls: its background tasks


def start_bare(work: Path) -> tuple[subprocess.Popen[bytes], str]:
    address = f"127.0.0.1:{free_port()}"
    with (work / "bare.log").open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, __file__, "--serve-bare", address], stdout=out, stderr=out
        )
    if not wait_serving(address, process=proc):
        raise SystemExit(f"the bare server did not start:\n{(work / 'bare.log').read_text()}")
    return proc, address


def measure_idle(servers: list[Server]) -> None:
    """All at once, with no calls: what their background tasks cost."""
    before = [cpu_seconds([s.pid]) for s in servers]
    time.sleep(IDLE_S)
    for server, cpu in zip(servers, before, strict=True):
        server.idle = (cpu_seconds([server.pid]) - cpu) / IDLE_S


def empty_round(servers: list[Server], body: Path, calls: int) -> None:
    """`calls` empty calls to each server, in CHUNKS turns (the order rotating), so that
    what else the machine does falls on all of them alike."""
    seconds, cpu = dict.fromkeys(range(len(servers)), 0.0), dict.fromkeys(range(len(servers)), 0.0)
    for turn in range(CHUNKS):
        order = [*range(turn % len(servers), len(servers)), *range(turn % len(servers))]
        for i in order:
            server = servers[i]
            started = cpu_seconds([server.pid])
            result = h2load(server.address, HEALTH, body, calls // CHUNKS, EMPTY_IN_FLIGHT)
            if result.failed:
                raise SystemExit(f"{server.name}: {result.failed} empty calls failed")
            seconds[i] += result.seconds
            cpu[i] += cpu_seconds([server.pid]) - started
    for i, server in enumerate(servers):
        server.empty.append(calls // CHUNKS * CHUNKS / seconds[i])
        server.cpu_us.append(cpu[i] * 1e6 / (calls // CHUNKS * CHUNKS))
        print(
            f"    {server.name:<52} {server.empty[-1]:7,.0f}/s  "
            f"CPU {server.cpu_us[-1]:5.0f} us/call"
        )


def single_publishes(node: NodeRun, bodies: Path) -> float:
    """Stored envelopes per second; every publish must be answered OK and stored."""
    before = node.stored()
    result, _ = bodies_load(node.address, PUBLISH, bodies, SINGLES_IN_FLIGHT)
    stored = node.stored() - before
    print(f"    single publishes (node) {stored / result.seconds:7,.0f}/s   {load()}")
    if stored != result.succeeded:
        raise SystemExit(f"{result.succeeded} publishes answered OK, {stored} stored")
    return stored / result.seconds


def ratios(server: Server, bare: Server) -> list[float]:
    return [mine / theirs for mine, theirs in zip(server.empty, bare.empty, strict=True)]


def cpu_ratios(server: Server, bare: Server) -> list[float]:
    """The bare server's CPU per call over this one's: the rate ratio if both had a core."""
    return [theirs / mine for mine, theirs in zip(server.cpu_us, bare.cpu_us, strict=True)]


def spread(values: list[float], fmt: str) -> str:
    """The median, and the range over the rounds."""
    low, high = min(values), max(values)
    return f"{statistics.median(values):{fmt}} ({low:{fmt}}-{high:{fmt}})"


def report(bare: Server, variants: list[Server], singles: list[float]) -> None:
    print("\nmedian (range) of the rounds; each ratio is to the bare server of the same round")
    print(f"  {'':<52} {'empty calls/s':>22} {'of bare':>18} {'CPU us/call':>12} "
          f"{'CPU of bare':>18} {'idle':>6}")  # fmt: skip
    for s in [bare, *variants]:
        print(
            f"  {s.name:<52} {spread(s.empty, ',.0f'):>22} {spread(ratios(s, bare), '.2f'):>18} "
            f"{statistics.median(s.cpu_us):>12.0f} {spread(cpu_ratios(s, bare), '.2f'):>18} "
            f"{s.idle:>6.1%}"
        )
    node = variants[0]
    print("\nwhat each part costs: the node's figure taken out with it (of the bare server's)")
    for s in variants[1:]:
        gains = [a - b for a, b in zip(ratios(s, bare), ratios(node, bare), strict=True)]
        cpu = [b - a for a, b in zip(s.cpu_us, node.cpu_us, strict=True)]
        print(f"  {s.name.removeprefix('node without '):<44} calls/s {spread(gains, '+.2f'):>20}"
              f"   CPU per call {spread(cpu, '+.0f')} us   idle {node.idle - s.idle:+.1%}"
              " of a core")  # fmt: skip
    of_bare = [s / b for s, b in zip(singles, bare.empty, strict=True)]
    print("\ngoals (per worker, median (range) of the rounds):")
    by_cpu = spread(cpu_ratios(node, bare), ".2f")
    print(f"  node's empty calls / bare server's   {spread(ratios(node, bare), '.2f')}   "
          f"goal >= {GOAL_EMPTY}   (by CPU per call: {by_cpu})")  # fmt: skip
    print(f"  single publishes / bare empty calls  {spread(of_bare, '.2f')}   "
          f"goal >= {GOAL_SINGLES}   ({spread(singles, ',.0f')} publishes/s)")  # fmt: skip
    print(f"end: {load()}, {os.cpu_count()} cores")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=20_000, help="empty calls per server")
    parser.add_argument("--singles", type=int, default=5_000, help="single publishes per round")
    parser.add_argument("--serve-bare", metavar="ADDRESS", help=argparse.SUPPRESS)
    parser.add_argument("--serve-node", metavar="VARIANT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_bare:
        return serve_bare(args.serve_bare)
    if args.serve_node:
        return serve_node(args.serve_node)
    require_h2load()
    require_node()
    work = Path(tempfile.mkdtemp(prefix="xnode-bench-percall-"))
    work.chmod(0o755)  # Postgres runs as `postgres` when we are root
    print(f"start: {load()}, {os.cpu_count()} cores")
    empty = work / "empty.bin"
    empty.write_bytes(grpc_frame(b""))
    warm_up = write_publishes(work / "warm-up.bin", 1000, 1, b"\x01" * 16)
    rounds = [
        write_publishes(work / f"single-{r}.bin", args.singles, 1, b"\x01" * 16)
        for r in range(args.rounds)
    ]
    cluster = start_cluster(work / "pg", fsync=True)
    nodes: list[NodeRun] = []
    bare_proc = None
    try:
        bare_proc, address = start_bare(work)
        bare = Server("bare grpc.aio server", address, bare_proc.pid)
        key = SigningKey.generate()  # one key: they share the registry file (nodes.json)
        for i, name in enumerate(HOOKS):
            command = (__file__, "--serve-node", name)
            nodes.append(start_node(cluster, work, key, 1, command, f"v{i}"))
        variants = [
            Server(name, n.address, n.proc.pid) for name, n in zip(HOOKS, nodes, strict=True)
        ]
        servers = [bare, *variants]
        for server in servers:
            h2load(server.address, HEALTH, empty, 2000, EMPTY_IN_FLIGHT)  # warm-up
        measure_idle(servers)
        single_publishes(nodes[0], warm_up)
        singles: list[float] = []
        for round_ in range(1, args.rounds + 1):
            print(f"round {round_}: {load()}")
            empty_round(servers, empty, args.calls)
            singles.append(single_publishes(nodes[0], rounds[round_ - 1]))
    finally:
        for node in nodes:
            node.stop()
        if bare_proc is not None:
            bare_proc.terminate()
            bare_proc.wait(30)
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    report(bare, variants, singles)


if __name__ == "__main__":
    main()
