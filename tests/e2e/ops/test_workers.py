"""`xnode run --workers 2` as an operator runs it (issue 14): one port, two serving processes,
one database and key. Publishes from many connections land on both workers, the node's
sequence ids stay unique and gap-free, replication runs in one worker only, a worker killed
with SIGKILL is started again, and SIGTERM drains both (tests/e2e/ops/test_drain.py)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import urllib.request
from typing import Any

from tests.support.waiting import eventually
from xnode.client.node import NodeClient
from xnode.core.crypto import SigningKey
from xnode.core.cursors import Cursor
from xnode.core.envelopes import parse_originator_envelope
from xnode.devtools.postgres import free_port
from xnode.devtools.processes import descendant_pids

GROUP = b"\x57" * 16
PAYER = SigningKey.generate()
CONNECTIONS = 24
PUBLISHES_EACH = 15


def _events(output: str, event: str) -> list[dict[str, Any]]:
    found = []
    for line in output.splitlines():
        if f'"{event}"' in line:
            record = json.loads(line[line.index("{") :])
            if record.get("event") == event:
                found.append(record)
    return found


async def all_workers_serving(node: Any) -> None:
    """The port answers once the first worker serves; the others start after it."""

    async def serving() -> bool:
        return bool(_events(node.output(), "node_workers_serving"))

    await eventually(serving, within_s=120)


async def _spawn_workers(spawn_node: Any, database: str, node_spec: Any, **extra: str) -> Any:
    """A node of two workers, once both serve."""
    node = spawn_node(database, node_spec, workers="2", **extra)
    await all_workers_serving(node)
    return node


async def _publisher(address: str, tag: str, count: int) -> int:
    """Publishes `count` envelopes one at a time over a connection of its own."""
    async with NodeClient(address, own_connection=True) as client:
        for i in range(count):
            await client.publish_group_messages(PAYER, 100, GROUP, [f"{tag}-{i}".encode()])
    return count


async def _publish_from_many(address: str, tag: str) -> int:
    done = await asyncio.gather(
        *(_publisher(address, f"{tag}-{c}", PUBLISHES_EACH) for c in range(CONNECTIONS))
    )
    return sum(done)


async def _sequence_ids(address: str) -> list[int]:
    ids: list[int] = []
    async with NodeClient(address) as client:
        cursor = Cursor()
        while page := await client.query(originators=[100], cursor=cursor, limit=1000):
            ids += [parse_originator_envelope(e.SerializeToString()).sequence_id for e in page]
            cursor = Cursor({100: ids[-1]})
    return ids


def _publishes_by_worker(metrics_address: str) -> dict[str, float]:
    with urllib.request.urlopen(f"http://{metrics_address}/metrics", timeout=10) as response:
        text = response.read().decode()
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("xnode_publish_latency_seconds_count{"):
            worker = line.split('worker="', 1)[1].split('"', 1)[0]
            counts[worker] = counts.get(worker, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


async def test_two_workers_serve_one_port_with_gap_free_sequence_ids(
    spawn_node: Any, database: str, node_spec: Any
) -> None:
    metrics = f"127.0.0.1:{free_port()}"
    node = await _spawn_workers(spawn_node, database, node_spec, metrics_address=metrics)
    sent = await _publish_from_many(node.address, "a")
    ids = await _sequence_ids(node.address)
    assert ids == list(range(1, sent + 1)), "sequence ids must be unique and gap-free"
    by_worker = await asyncio.to_thread(_publishes_by_worker, metrics)
    assert set(by_worker) == {"0", "1"} and all(by_worker.values()), by_worker
    assert sum(by_worker.values()) == sent, by_worker
    output = node.output()
    started = _events(output, "replication_started")
    assert [e.get("worker") for e in started] == [0], "replication runs in worker 0 only"
    assert len(_events(output, "node_listening")) == 2
    assert node.terminate(60) == 0, node.output()[-3000:]
    assert _events(node.output(), "node_workers_stopped")[0]["exit_code"] == 0
    # Worker 0 sequences every publish, worker 1's through the link: no fast-path misses.
    appends = {e["worker"]: e for e in _events(node.output(), "sequencer_appends")}
    assert (appends[0]["locked"], appends[0]["fast_misses"]) == (0, 0), appends
    assert appends[1]["fast"] + appends[1]["locked"] == 0, appends
    assert _events(node.output(), "sequencer_link_stopped")[0]["forwarded"] > 0


async def test_a_killed_worker_is_started_again(
    spawn_node: Any, database: str, node_spec: Any
) -> None:
    node = await _spawn_workers(spawn_node, database, node_spec)
    pids = _events(node.output(), "node_workers_serving")[0]["pids"]
    os.kill(pids["1"], signal.SIGKILL)

    async def restarted() -> bool:
        return len(_events(node.output(), "worker_started")) == 3

    await eventually(restarted, within_s=120)
    exited = _events(node.output(), "worker_exited")
    assert [(e["worker"], e["exit_code"]) for e in exited] == [(1, -signal.SIGKILL)]
    new_pid = _events(node.output(), "worker_started")[-1]["pid"]
    assert new_pid != pids["1"]

    async def serving_again() -> bool:
        return len(_events(node.output(), "node_listening")) == 3

    await eventually(serving_again, within_s=120)
    sent = await _publish_from_many(node.address, "b")
    assert await _sequence_ids(node.address) == list(range(1, sent + 1))
    assert node.terminate(60) == 0, node.output()[-3000:]


async def test_a_killed_supervisor_takes_its_workers_down(
    spawn_node: Any, database: str, node_spec: Any
) -> None:
    node = await _spawn_workers(spawn_node, database, node_spec)
    pids = _events(node.output(), "node_workers_serving")[0]["pids"]
    # The processes under the workers too: the first one's signing process, the fork server
    # and the replication verifiers. They die with their worker (xnode.replication.lifeline).
    under = [child for pid in pids.values() for child in descendant_pids(pid)]
    assert under, "no process under the workers: the first should have a signing process"
    node.kill()

    def gone(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                return stat.read().rsplit(")", 1)[1].split()[0] == "Z"  # exited, not reaped
        except FileNotFoundError:
            return True

    async def workers_gone() -> bool:
        return all(gone(pid) for pid in [*pids.values(), *under])

    await eventually(workers_gone, within_s=60)
