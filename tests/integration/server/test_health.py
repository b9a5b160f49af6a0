"""gRPC health follows the node's dependencies: the database (every service) and the chain
(publishing only: the node overall, which official clients check before reading, stays
SERVING while only chain-bound publishes must wait)."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import grpc
from grpc_health.v1 import health_pb2

from tests.conftest import ChainEnv, NodeSpec, node_settings
from tests.support.waiting import eventually_value
from xnode.client.grpc_services import health_check
from xnode.client.node import NodeClient
from xnode.core.crypto import SigningKey
from xnode.core.topics import Topic, TopicKind
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

CHAIN_SERVICES = ["publish", f"{PACKAGE}.PublishApi"]
READ_SERVICES = ["", "query", "replication", f"{PACKAGE}.QueryApi", f"{PACKAGE}.ReplicationApi"]
PAYER = SigningKey.generate()


async def _statuses(address: str, services: list[str]) -> dict[str, int]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = health_check(channel)
        return {
            s: (await stub(health_pb2.HealthCheckRequest(service=s), timeout=5)).status
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
    await _wait_for(node.address, dict.fromkeys(CHAIN_SERVICES + READ_SERVICES, SERVING), 10)
    chain_env.anvil.stop()  # the indexer can no longer follow the chain
    await _wait_for(
        node.address,
        {**dict.fromkeys(CHAIN_SERVICES, NOT_SERVING), **dict.fromkeys(READ_SERVICES, SERVING)},
        15,
    )


async def test_a_trailing_chain_index_holds_back_publishing_only(
    start_node: Any, database: str, node_spec: NodeSpec, chain_env: ChainEnv
) -> None:
    """The chain runs on but the index trails it (one block a page, 2000 mined at once):
    the node overall and its reads stay SERVING, and a publish that names no chain payload
    still goes through."""
    chain_env.register(node_spec)
    settings = chain_env.settings(chain_page_blocks=1, chain_max_lag_blocks=2)
    node = await start_node(**node_settings(database, node_spec, **settings))
    await _wait_for(node.address, dict.fromkeys(CHAIN_SERVICES + READ_SERVICES, SERVING), 10)
    for _ in range(4):  # anvil mines 500 blocks in a call well within its RPC timeout
        await asyncio.to_thread(chain_env.rpc, "anvil_mine", hex(500))
    await _wait_for(
        node.address,
        {**dict.fromkeys(CHAIN_SERVICES, NOT_SERVING), **dict.fromkeys(READ_SERVICES, SERVING)},
        15,
    )
    assert node.chain is not None
    status = node.chain.indexer.status
    assert (status.lag_blocks or 0) > 2, "the index caught up before health was read"
    async with NodeClient(node.address) as client:
        published = await client.publish_group_messages(PAYER, 100, bytes(16), [b"hi"])
        assert len(published) == 1
        assert await client.query(topics=[Topic(TopicKind.GROUP_MESSAGES, bytes(16)).raw])
