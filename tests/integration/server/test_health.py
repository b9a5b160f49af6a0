"""gRPC health follows the node's dependencies: the database (every service) and the chain
(publish, and the node overall)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import asyncpg
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.conftest import ChainEnv, NodeSpec, node_settings
from tests.waiting import eventually_value
from xnode.devtools.postgres import PgCluster

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
PACKAGE = "xmtp.xmtpv4.message_api"
DATABASE_SERVICES = [
    "",
    "publish",
    "query",
    "replication",
    f"{PACKAGE}.PublishApi",
    f"{PACKAGE}.QueryApi",
    f"{PACKAGE}.ReplicationApi",
    f"{PACKAGE}.MisbehaviorApi",
]


async def _statuses(address: str, services: list[str]) -> dict[str, int]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return {
            s: (await stub.Check(health_pb2.HealthCheckRequest(service=s), timeout=5)).status
            for s in services
        }


async def _wait_for(address: str, expected: dict[str, int], within_s: float) -> None:
    await eventually_value(
        lambda: _statuses(address, list(expected)), expected.__eq__, within_s, f"health {expected}"
    )


async def _allow_connections(pg_cluster: PgCluster, dsn: str, allow: bool) -> None:
    """Opens or closes the node's database to connections; closing also ends those open."""
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


async def test_health_follows_the_database(
    start_node: Any, database: str, node_spec: NodeSpec, pg_cluster: PgCluster
) -> None:
    node = await start_node(**node_settings(database, node_spec))
    await _wait_for(node.address, dict.fromkeys(DATABASE_SERVICES, SERVING), 1)
    await _allow_connections(pg_cluster, database, False)
    try:
        await _wait_for(node.address, dict.fromkeys(DATABASE_SERVICES, NOT_SERVING), 10)
    finally:
        await _allow_connections(pg_cluster, database, True)
    await _wait_for(node.address, dict.fromkeys(DATABASE_SERVICES, SERVING), 10)


async def test_publish_follows_the_chain(
    start_node: Any, database: str, node_spec: NodeSpec, chain_env: ChainEnv
) -> None:
    chain_env.register(node_spec)
    settings = chain_env.settings(chain_rpc_timeout_seconds=1.0)
    node = await start_node(**node_settings(database, node_spec, **settings))
    chain_services = ["", "publish", f"{PACKAGE}.PublishApi"]
    others = ["query", "replication", f"{PACKAGE}.QueryApi"]
    await _wait_for(node.address, dict.fromkeys(chain_services + others, SERVING), 10)
    chain_env.anvil.stop()  # the indexer can no longer follow the chain
    await _wait_for(
        node.address,
        {**dict.fromkeys(chain_services, NOT_SERVING), **dict.fromkeys(others, SERVING)},
        15,
    )
