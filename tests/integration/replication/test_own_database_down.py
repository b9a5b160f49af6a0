"""A node whose own database is down files no liveness reports against its peers (issue 9
part 5). Node 200 (a fake peer in the test) fails every request, as a peer sharing a stopped
Postgres would; node 100's database is closed under the running replication, then opened
again while 200 is still failing. No liveness report may be recorded for that window."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import grpc
from prometheus_client import REGISTRY

from tests.conftest import Network
from tests.support.fake_peer import serve_subscribe_originators
from tests.support.waiting import eventually
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.core.misbehavior import LIVENESS_TYPES
from xnode.devtools.postgres import PgCluster


class FailingPeer:
    def __init__(self) -> None:
        self.failing = True
        self.requests = 0

    async def subscribe(self, request: bytes, context: Any) -> AsyncIterator[bytes]:
        self.requests += 1
        if self.failing:
            await context.abort(grpc.StatusCode.INTERNAL, "its database is down too")
        yield b""
        await asyncio.sleep(3600)

    async def serve(self, address: str) -> grpc.aio.Server:
        return await serve_subscribe_originators(self.subscribe, address)


async def allow_connections(pg_cluster: PgCluster, dsn: str, allow: bool) -> None:
    """As tests/integration/server/test_health.py: closing also ends the open connections."""
    name = urlsplit(dsn).path.lstrip("/")
    conn = await asyncpg.connect(pg_cluster.dsn())
    try:
        await conn.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {str(allow).lower()}')
        if not allow:
            await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name
            )
    finally:
        await conn.close()


def withheld() -> float:
    value = REGISTRY.get_sample_value(
        "xnode_liveness_reports_withheld_total", {"type": "FAILED_REQUEST"}
    )
    return value or 0.0


async def liveness_reports(dsn: str) -> list[mb.UnsignedMisbehaviorReport]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch("SELECT report FROM misbehavior_reports ORDER BY id")
    finally:
        await conn.close()
    unsigned = [
        mb.UnsignedMisbehaviorReport.FromString(
            mb.MisbehaviorReport.FromString(r[0]).unsigned_misbehavior_report
        )
        for r in rows
    ]
    return [u for u in unsigned if int(u.type) in LIVENESS_TYPES]


async def test_no_liveness_reports_while_the_own_database_is_down(
    start_node: Any, network: Network, pg_cluster: PgCluster
) -> None:
    peer = FailingPeer()
    server = await peer.serve(network.addresses[200])
    dsn = network.dsns[100]
    try:
        await start_node(**network.settings(100))

        async def peer_reported() -> bool:  # the failing peer is reported while all is well
            return any(r.misbehaving_node_id == 200 for r in await liveness_reports(dsn))

        await eventually(peer_reported)
        before = withheld()
        await allow_connections(pg_cluster, dsn, False)
        # From here on the node's connections are gone: a report built earlier may still be
        # stored, with an earlier reporter time.
        window_start = time.time_ns()
        try:
            asked = peer.requests

            async def retried_while_down() -> bool:
                return peer.requests >= asked + 2

            await eventually(retried_while_down)
        finally:
            await allow_connections(pg_cluster, dsn, True)
        reopened = peer.requests

        async def retried_just_after() -> bool:  # 200 still fails as the database is back
            return peer.requests >= reopened + 3

        await eventually(retried_just_after)
        peer.failing = False
        window_end = time.time_ns()
    finally:
        await server.stop(None)

    in_window = [
        r for r in await liveness_reports(dsn) if window_start <= r.reporter_time_ns <= window_end
    ]
    assert in_window == []
    assert withheld() > before  # withheld, not lost to a store that was down
