"""A node on Patroni with a synchronous standby (its primary killed, frozen or cut off, in a
network: test_ha_network.py). With the standby as its read replica, queries read there unless
their cursor is ahead of it, and the replica's lag is a metric; a stale /sync key is
cleared."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import NodeProcess, NodeSpec
from tests.integration.server.test_metrics import _scrape
from tests.support.waiting import eventually_value
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
