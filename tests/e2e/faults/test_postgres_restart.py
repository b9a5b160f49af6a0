"""A node's own Postgres restarted under publish load: publishing resumes once it is back.

Many publishers keep publishes in flight, with client deadlines short enough that some give up
while their publish waits for its group commit (the server then cancels the call). Before each
restart the database is made slow, as a loaded one is: a transaction of the test locks the
envelopes table, so the group commit's statements wait and deadlines pass meanwhile. Postgres
is then stopped (fast, or immediate) and started again, failing those statements. After each
restart a publish must succeed within a deadline, as queries do: the group commit must outlive
a store failure that meets requests whose callers are gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import asyncpg
import grpc

from tests.conftest import NodeProcess, NodeSpec
from tests.support.scratch import scratch_dir
from tests.support.waiting import eventually
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.client.node import NodeClient, group_message_envelope
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import build_payer_envelope
from xnode.devtools.postgres import PgCluster, as_server_user, start_cluster
from xnode.store.migrate import upgrade_to_head

PAYER = SigningKey.generate()
GROUP = bytes([0x9A]) * 16
PUBLISHERS = 50
# Client deadlines cycled through by the publishers: the short ones expire while the publish
# waits in the group commit, which is what the restart must meet.
DEADLINES_S = (0.05, 0.2, 0.5, 1.0, 3.0)
RESTARTS = ("fast", "immediate", "fast", "immediate")


@contextlib.contextmanager
def own_cluster() -> Iterator[PgCluster]:
    """A cluster of this test's own: the session's is shared and never restarted."""
    root = scratch_dir("xnode-pg-restart-")
    cluster = start_cluster(root / "data", fsync=False)
    try:
        yield cluster
    finally:
        with contextlib.suppress(Exception):
            cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def _restart(cluster: PgCluster, mode: str) -> None:
    stop = ["pg_ctl", "-D", str(cluster.data_dir), "-m", mode, "-w", "stop"]
    subprocess.run(as_server_user(stop), check=True, capture_output=True)
    start_cluster(cluster.data_dir, fsync=False, port=cluster.port)


def _envelope(tag: str) -> list[envelopes_pb2.PayerEnvelope]:
    data = f"pg-restart-{tag}-{uuid.uuid4().hex}".encode()
    return [build_payer_envelope(group_message_envelope(GROUP, data), PAYER, 100)]


@dataclass
class Load:
    acked: int = 0
    expired: int = 0  # publishes whose client deadline passed


async def _publisher(address: str, number: int, stop: asyncio.Event, load: Load) -> None:
    deadlines = itertools.cycle(DEADLINES_S[number % len(DEADLINES_S) :] + DEADLINES_S)
    async with NodeClient(address) as client:
        while not stop.is_set():
            try:
                await client.publish(_envelope(str(number)), deadline_s=next(deadlines))
            except grpc.aio.AioRpcError as exc:
                if exc.code() is grpc.StatusCode.DEADLINE_EXCEEDED:
                    load.expired += 1
                await asyncio.sleep(0.01)  # down, or the deadline passed: publish again
                continue
            load.acked += 1


async def _publishes(address: str) -> bool:
    """Whether one publish is answered within 5 s."""
    async with NodeClient(address) as client:
        try:
            await client.publish(_envelope("probe"), deadline_s=5.0)
        except grpc.aio.AioRpcError:
            return False
    return True


async def _restart_while_publishes_wait(
    cluster: PgCluster, dsn: str, mode: str, load: Load
) -> None:
    """Under load, the envelopes table is locked until publishes expire waiting on it, then
    Postgres restarts (ending the lock's session)."""
    acked, expired = load.acked, load.expired
    await eventually(lambda: load.acked > acked + 200, 60, "publishes under load")
    blocker = await asyncpg.connect(dsn)
    await blocker.execute("BEGIN; LOCK TABLE originator_envelopes IN ACCESS EXCLUSIVE MODE")
    await eventually(lambda: load.expired > expired + 20, 60, "publishes expired waiting")
    await asyncio.to_thread(_restart, cluster, mode)
    blocker.terminate()


async def test_publishing_resumes_after_each_postgres_restart_under_load(
    node_spec: NodeSpec, spawn_node: Callable[..., NodeProcess]
) -> None:
    with own_cluster() as cluster:
        cluster.create_database("node")
        dsn = cluster.dsn("node")
        await asyncio.to_thread(upgrade_to_head, dsn)
        node = spawn_node(dsn, node_spec)
        stop = asyncio.Event()
        load = Load()
        publishers = [
            asyncio.create_task(_publisher(node.address, i, stop, load)) for i in range(PUBLISHERS)
        ]
        try:
            for mode in RESTARTS:
                await _restart_while_publishes_wait(cluster, dsn, mode, load)
                await eventually(
                    lambda: _publishes(node.address), 60, f"a publish after a {mode} restart"
                )
        finally:
            stop.set()
            await asyncio.gather(*publishers)
        assert node.proc.poll() is None, "the node kept running through the restarts"
