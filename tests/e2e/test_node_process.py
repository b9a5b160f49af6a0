"""`xnode run` as a subprocess: crashes, restarts, shared databases, shutdown, refusals."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from typing import Any

import grpc

from xnode.client.node import NodeClient, envelopes_of
from xnode.core.crypto import SigningKey
from xnode.core.cursors import Cursor
from xnode.core.envelopes import parse_originator_envelope

GROUP = b"\x42" * 16
TOPIC = b"\x00" + GROUP
PAYER = SigningKey.generate()


async def publish_until_stopped(
    address: str, stop: asyncio.Event, acked: dict[bytes, int], workers: int = 16
) -> list[str]:
    """Publishes single envelopes from many callers; records what was acknowledged. The
    refusals, each as its status and message."""
    failures: list[str] = []
    run = uuid.uuid4().hex

    async def worker(w: int) -> None:
        async with NodeClient(address) as client:
            i = 0
            while not stop.is_set():
                payload = f"{run} w{w}-{i}".encode()  # unique: a repeat is a refused replay
                i += 1
                try:
                    [env] = await client.publish_group_messages(PAYER, 100, GROUP, [payload])
                except grpc.aio.AioRpcError as exc:
                    failures.append(f"{exc.code().name}: {exc.details()}")
                    await asyncio.sleep(0.05)
                    continue
                acked[env.SerializeToString()] = parse_originator_envelope(
                    env.SerializeToString()
                ).sequence_id

    await asyncio.gather(*(worker(w) for w in range(workers)))
    return failures


async def all_stored(address: str) -> list[bytes]:
    out: list[bytes] = []
    async with NodeClient(address) as client:
        cursor = None
        while True:
            page = await client.query(originators=[100], cursor=cursor or Cursor(), limit=1000)
            if not page:
                return out
            out += [e.SerializeToString() for e in page]
            cursor = Cursor({100: parse_originator_envelope(out[-1]).sequence_id})


async def test_kill_9_under_load_loses_no_acknowledged_envelope(
    spawn_node: Any, database: str, node_spec: Any
) -> None:
    node = spawn_node(database, node_spec)
    stop, acked = asyncio.Event(), dict[bytes, int]()
    load = asyncio.create_task(publish_until_stopped(node.address, stop, acked))
    while len(acked) < 300:
        await asyncio.sleep(0.05)
    node.kill()  # SIGKILL in the middle of publishing
    await asyncio.sleep(0.5)
    stop.set()
    await load
    restarted = spawn_node(database, node_spec)
    stored = await all_stored(restarted.address)
    seqs = [parse_originator_envelope(raw).sequence_id for raw in stored]
    assert seqs == list(range(1, len(seqs) + 1)), "sequence ids must be 1..N without a gap"
    missing = set(acked) - set(stored)
    assert not missing, f"{len(missing)} acknowledged envelopes were lost"
    async with NodeClient(restarted.address) as client:
        [env] = await client.publish_group_messages(PAYER, 100, GROUP, [b"after restart"])
    assert parse_originator_envelope(env.SerializeToString()).sequence_id == len(seqs) + 1


async def test_two_processes_on_one_database_share_one_gap_free_sequence(
    spawn_node: Any, database: str, node_spec: Any
) -> None:
    # Without API limits: one payer publishes all 400+ envelopes, and its limit (200/s, a
    # burst of 400, shared by the processes) ran dry on a fast machine (RESOURCE_EXHAUSTED).
    first, second = (spawn_node(database, node_spec, limits_enabled="false") for _ in range(2))
    async with NodeClient(first.address) as watcher:
        call = watcher.subscribe(topics=[TOPIC])
        live: list[int] = []

        async def watch() -> None:
            async for env in envelopes_of(call):
                live.append(parse_originator_envelope(env.SerializeToString()).sequence_id)

        watching = asyncio.create_task(watch())
        await asyncio.sleep(0.3)
        stop, acked = asyncio.Event(), dict[bytes, int]()
        loads = [
            asyncio.create_task(publish_until_stopped(n.address, stop, acked, workers=8))
            for n in (first, second)
        ]
        while len(acked) < 400:
            await asyncio.sleep(0.05)
        stop.set()
        refused = [f for failures in await asyncio.gather(*loads) for f in failures]
        assert not refused, (refused, first.output()[-3000:], second.output()[-3000:])
        stored = await all_stored(second.address)
        for _ in range(100):  # live delivery from the other process arrives via NOTIFY
            if len(live) >= len(stored):
                break
            await asyncio.sleep(0.05)
        call.cancel()
        await asyncio.gather(watching, return_exceptions=True)
    seqs = [parse_originator_envelope(raw).sequence_id for raw in stored]
    assert seqs == list(range(1, len(acked) + 1))
    assert set(stored) == set(acked)
    assert live == seqs, "a subscriber on one process sees the other's commits, in order"


async def test_sigterm_drains_in_flight_publishes_and_closes_streams(
    spawn_node: Any, database: str, node_spec: Any
) -> None:
    node = spawn_node(database, node_spec)
    async with NodeClient(node.address) as client:
        call = client.subscribe(topics=[TOPIC])
        stop, acked = asyncio.Event(), dict[bytes, int]()
        load = asyncio.create_task(publish_until_stopped(node.address, stop, acked, workers=8))
        while len(acked) < 100:
            await asyncio.sleep(0.05)
        code = await asyncio.to_thread(node.terminate)
        stop.set()
        await load
        try:
            async for _ in call:
                pass
            stream_status = grpc.StatusCode.OK
        except grpc.aio.AioRpcError as exc:
            stream_status = exc.code()
    assert code == 0, node.output()[-2000:]
    assert stream_status == grpc.StatusCode.UNAVAILABLE
    assert '"node_stopped"' in node.output()
    restarted = spawn_node(database, node_spec)
    assert set(acked) <= set(await all_stored(restarted.address))


def run_refused(database: str, node_spec: Any, key: SigningKey) -> subprocess.CompletedProcess[str]:
    """Runs `xnode run` with `key`, expecting it to refuse to start."""
    env = {
        **os.environ,
        "XNODE_DATABASE_DSN": database,
        "XNODE_SIGNER_KEY": key.hex(),
        "XNODE_NODES_FILE": str(node_spec.nodes_file),
        "XNODE_LISTEN_ADDRESS": "127.0.0.1:0",
        "XNODE_METRICS_ADDRESS": "",
    }
    return subprocess.run(
        [sys.executable, "-m", "xnode.cli", "run"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_unregistered_key_refuses_to_start(database: str, node_spec: Any) -> None:
    done = run_refused(database, node_spec, SigningKey.generate())
    assert done.returncode == 2
    assert "is not in the node registry" in done.stderr


def test_database_of_another_node_refuses_to_start(
    spawn_node: Any, database: str, node_spec: Any
) -> None:
    spawn_node(database, node_spec, node_id=100).terminate()
    done = run_refused(database, node_spec, node_spec.keys[200])
    assert done.returncode == 2
    assert "this database belongs to node 100" in done.stderr


def _stat(pid: int) -> tuple[int, str, int] | None:
    """(parent pid, state, start time) of `pid` from /proc; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return int(fields[1]), fields[0], int(fields[19])


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return ""


def _descendants(root: int) -> dict[int, int]:
    """`root`'s living children, grandchildren, ... (pid -> start time, so a pid reused
    later is not taken for one of them)."""
    stats = {int(p): _stat(int(p)) for p in os.listdir("/proc") if p.isdigit()}
    found: dict[int, int] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, stat in stats.items():
            if stat is not None and stat[0] == parent and stat[1] != "Z" and pid not in found:
                found[pid] = stat[2]
                frontier.append(pid)
    return found


def _alive(pid: int, started: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[2] == started and stat[1] != "Z"


def test_kill_9_takes_the_bulk_verifiers_with_the_node(
    spawn_node: Any, database: str, node_spec: Any
) -> None:
    node = spawn_node(
        database, node_spec, replication_verify_processes="2", replication_repair_seconds="60"
    )
    # The pool starts with the repair task, just after the node serves: a fork server that
    # forks 2 workers (all three run `forkserver import main`) and a resource tracker.
    deadline = time.monotonic() + 60
    family = _descendants(node.proc.pid)
    while sum("forkserver import main" in _cmdline(p) for p in family) < 3:
        assert time.monotonic() < deadline, f"no bulk verifiers: {family}\n{node.output()[-2000:]}"
        time.sleep(0.05)
        family = _descendants(node.proc.pid)
    node.kill()
    deadline = time.monotonic() + 30
    left = {p: s for p, s in family.items() if _alive(p, s)}
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = {p: s for p, s in left.items() if _alive(p, s)}
    assert not left, f"outlived their node: {[_cmdline(p) for p in left]}"
