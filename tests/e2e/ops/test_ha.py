"""A node on Patroni with a synchronous standby, under publish load, loses its primary
(Jepsen-style): the primary's host is frozen (SIGSTOP; killed or cut off, in a network:
test_ha_network.py). Every acknowledged envelope survives with its sequence id and bytes, the
node's ids stay gap-free, and the node serves publishes again within 15 s of the standby's
promotion. With the standby as its read replica, queries read there unless their cursor is
ahead of it, and the replica's lag is a metric."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from tests.conftest import NodeProcess, NodeSpec
from tests.e2e.ops.test_restore import log_of
from tests.integration.server.test_metrics import _scrape
from tests.waiting import eventually, eventually_value
from xnode.client.node import NodeClient
from xnode.core.crypto import SigningKey
from xnode.core.cursors import Cursor
from xnode.core.envelopes import parse_originator_envelope
from xnode.core.topics import Topic, TopicKind
from xnode.devtools.patroni import HaCluster
from xnode.devtools.postgres import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

A = 100
PAYER = SigningKey.generate()
GROUP = bytes([9]) * 16
TOPIC = Topic(TopicKind.GROUP_MESSAGES, GROUP).raw
PUBLISHERS = 4
SERVE_AGAIN_S = 15.0
# A failed publish is retried after this pause, as a client backs off.
RETRY_S = 0.05
RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


@dataclass
class Load:
    """What the publishers were told: acknowledged envelopes by sequence id, and when."""

    acked: dict[int, bytes] = field(default_factory=dict)
    answered_at: list[float] = field(default_factory=list)
    refused: dict[str, int] = field(default_factory=dict)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    publishers: list[asyncio.Task[None]] = field(default_factory=list)

    async def count(self) -> int:
        for task in self.publishers:
            if task.done():
                task.result()  # a publisher told something it must not be is the failure
        return len(self.acked)

    async def served_since(self, moment: float) -> bool:
        return any(t > moment for t in self.answered_at)


async def publisher(address: str, load: Load, worker: int) -> None:
    async with NodeClient(address) as client:
        count = 0
        while not load.stop.is_set():
            count += 1
            payload = f"{worker}-{count}".encode()
            try:
                got = await client.publish_group_messages(PAYER, A, GROUP, [payload])
            except grpc.aio.AioRpcError as exc:
                assert exc.code() in RETRYABLE, f"a failover answered {exc.code()}: {exc}"
                load.refused[exc.code().name] = load.refused.get(exc.code().name, 0) + 1
                await asyncio.sleep(RETRY_S)
                continue
            for envelope in got:
                raw = envelope.SerializeToString()
                load.acked[parse_originator_envelope(raw).sequence_id] = raw
            load.answered_at.append(time.monotonic())


def node_on(
    cluster: HaCluster, spawn: Callable[..., NodeProcess], directory: Path
) -> tuple[NodeProcess, str]:
    name = f"ha_{uuid.uuid4().hex[:8]}"
    cluster.create_database(name)
    spec = NodeSpec(directory, {A: SigningKey.generate()})
    spec.write()
    dsn = cluster.dsn(name)
    # No API limits: the load is there to meet the failover, not the payer's rate limit.
    node = spawn(dsn, spec, A, database_primary_check_seconds="0.2", limits_enabled="false")
    return node, dsn


@dataclass
class Fault:
    """What happens to the primary's host (`inflict`) and how it comes back (`heal`), each
    given the member's name."""

    inflict: Callable[[str], None]
    heal: Callable[[str], None]


def signalled(cluster: HaCluster, sig: signal.Signals) -> Fault:
    """The host killed (restarted after) or frozen (resumed after)."""
    if sig == signal.SIGKILL:
        return Fault(lambda m: cluster.signal_member(m, sig), cluster.start_member)
    return Fault(
        lambda m: cluster.signal_member(m, sig), lambda m: cluster.signal_member(m, signal.SIGCONT)
    )


async def fail_over(cluster: HaCluster, node: NodeProcess, dsn: str, fault: Fault) -> Load:
    """Publishes to `node` (its database `dsn` on `cluster`) while the primary's host meets
    `fault`; heals it once the standby is promoted and checks what the publishers were told."""
    load = Load()
    tasks = [asyncio.create_task(publisher(node.address, load, i)) for i in range(PUBLISHERS)]
    load.publishers = tasks
    try:
        await eventually_value(load.count, lambda n: n >= 100, what="publishes before the fault")
        old = await asyncio.to_thread(cluster.leader)
        assert old is not None
        fault.inflict(old)
        await eventually_value(
            lambda: asyncio.to_thread(cluster.leader),
            lambda new: new not in (None, old),
            60,
            "the standby promoted",
        )
        promoted = time.monotonic()
        await eventually(
            lambda: load.served_since(promoted), SERVE_AGAIN_S, "a publish answered after it"
        )
        fault.heal(old)
        await asyncio.to_thread(cluster.wait_ready)
        before = len(load.acked)
        try:
            await eventually_value(load.count, lambda n: n > before + 50, what="rejoined")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{cluster.diagnosis()}") from None
    finally:
        load.stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
    stored = await log_of(dsn, A)
    assert sorted(stored) == list(range(1, len(stored) + 1)), "sequence ids with a gap"
    changed = [s for s, raw in load.acked.items() if stored.get(s) != raw]
    assert not changed, (
        f"acknowledged envelopes lost or changed: {changed[:10]} ({len(stored)} stored)\n"
        f"{cluster.diagnosis()}"
    )
    assert node.proc.poll() is None, node.output()[-3000:]
    assert '"database_primary_changed"' in node.output()
    return load


async def test_primary_frozen(
    ha_cluster: HaCluster, spawn_node: Callable[..., NodeProcess], tmp_path: Path
) -> None:
    node, dsn = node_on(ha_cluster, spawn_node, tmp_path)
    await fail_over(ha_cluster, node, dsn, signalled(ha_cluster, signal.SIGSTOP))


def replay(cluster: HaCluster, member: str, sig: signal.Signals) -> None:
    """Stops (SIGSTOP) or resumes (SIGCONT) WAL replay on a standby: its walreceiver still
    flushes and acknowledges WAL (the primary's commits go on), but nothing is applied
    meanwhile. (Patroni resumes a replay paused by pg_wal_replay_pause at once.)"""
    sql = "SELECT pid FROM pg_stat_activity WHERE backend_type = 'startup'"
    done = subprocess.run(
        ["psql", cluster.member_dsn(member), "-tAc", sql],
        capture_output=True,
        text=True,
        check=True,
    )
    os.kill(int(done.stdout), sig)


async def test_reads_from_the_replica(
    ha_cluster: HaCluster, spawn_node: Callable[..., NodeProcess], tmp_path: Path
) -> None:
    leader = await asyncio.to_thread(ha_cluster.wait_ready)
    standby = next(m for m in ha_cluster.members if m != leader)
    name = f"ha_{uuid.uuid4().hex[:8]}"
    ha_cluster.create_database(name)
    spec = NodeSpec(tmp_path, {A: SigningKey.generate()})
    spec.write()
    metrics = f"127.0.0.1:{free_port()}"
    node = spawn_node(
        ha_cluster.dsn(name),
        spec,
        A,
        metrics_address=metrics,
        database_replica_dsn=ha_cluster.member_dsn(standby, name),
        database_replica_check_seconds="0.1",
    )

    def scraped(metric: str, **labels: str) -> float | None:
        """The sample of `metric` with these labels (and the node's)."""
        wanted = frozenset({**labels, "node": str(A)}.items())
        return _scrape(metrics).get((metric, wanted))

    async def lag_bytes() -> float | None:
        return await asyncio.to_thread(scraped, "xnode_database_replica_lag_bytes")

    async def ids(cursor: Cursor) -> list[int]:
        found = await client.query(topics=[TOPIC], cursor=cursor)
        return [parse_originator_envelope(e.SerializeToString()).sequence_id for e in found]

    async with NodeClient(node.address) as client:
        await client.publish_group_messages(PAYER, A, GROUP, [b"before"])
        await eventually_value(lambda: ids(Cursor()), lambda got: got == [1])  # on the replica
        replica_reads = scraped("xnode_reads_routed_total", to="replica")
        assert replica_reads, "no query was read from the replica"
        replay(ha_cluster, standby, signal.SIGSTOP)
        try:
            await client.publish_group_messages(PAYER, A, GROUP, [b"mine"])
            await client.publish_group_messages(PAYER, A, GROUP, [b"next"])
            # Past the replica (it holds 1): the primary answers, with what follows 2.
            assert await ids(Cursor({A: 2})) == [3]
            assert await ids(Cursor()) == [1]  # the replica, behind
            await eventually_value(lag_bytes, lambda lag: lag is not None and lag > 0)
        finally:
            replay(ha_cluster, standby, signal.SIGCONT)
        await eventually_value(lag_bytes, lambda lag: lag == 0, what="the replica caught up")
        assert await ids(Cursor()) == [1, 2, 3]
    assert (scraped("xnode_reads_routed_total", to="replica") or 0) > replica_reads + 1
    assert scraped("xnode_reads_routed_total", to="primary")


def test_a_stale_sync_key_is_cleared(ha_cluster: HaCluster) -> None:
    """Patroni 3.0.2 never replaces a /sync key naming another leader (docs/ha.md); waiting
    for the cluster deletes such a key, and the leader makes its standby synchronous again."""
    leader = ha_cluster.wait_ready()
    standby = next(m for m in ha_cluster.members if m != leader)
    stale = json.dumps({"leader": standby, "sync_standby": None})
    put = urllib.request.Request(
        ha_cluster.sync_url, data=urllib.parse.urlencode({"value": stale}).encode(), method="PUT"
    )
    urllib.request.urlopen(put, timeout=5).close()
    assert ha_cluster.sync_key() == {"leader": standby, "sync_standby": None}
    assert ha_cluster.wait_ready() == leader
    assert ha_cluster.sync_key() == {"leader": leader, "sync_standby": standby}
