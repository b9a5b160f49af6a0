"""A start-up step that fails releases everything started before it: no Postgres connection
of the node stays open, no task of it keeps running, its gRPC and metrics ports are free."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest

from tests.conftest import ChainEnv, NodeSpec, node_settings
from tests.support.leftovers import Injected, boom, boom_sync, bound, new_tasks, running_tasks
from tests.support.waiting import eventually
from xnode.chain.node import ChainServices
from xnode.config import Settings
from xnode.devtools.postgres import PgCluster, free_port
from xnode.replication.worker import ReplicationWorker
from xnode.server import bootstrap, serving, wiring
from xnode.server.wiring import start_node
from xnode.static_registry import StaticRegistrySource
from xnode.store.notifications import CommitListener
from xnode.store.sequencer import Sequencer
from xnode.usecases.health import HealthMonitor
from xnode.usecases.originator import Originator

# step -> (object, attribute) replaced by a failing callable, in start-up order
STEPS: dict[str, tuple[Any, str, Callable[..., Any]]] = {
    "registry": (wiring, "open_registry", boom),
    "migrations": (bootstrap, "upgrade_to_head", boom_sync),
    "pool": (bootstrap, "create_pool", boom),
    "claim_database": (bootstrap, "claim_database", boom),
    "sequencer_prime": (Sequencer, "prime", boom),
    "registry_start": (StaticRegistrySource, "start", boom),
    "commit_listener": (CommitListener, "start", boom_sync),
    "originator": (Originator, "start", boom_sync),
    "metrics": (serving, "serve_metrics", boom_sync),
    "grpc_server_bind": (wiring, "bind", boom_sync),
    "health_monitor": (HealthMonitor, "start", boom),
    "grpc_server_start": (serving.GrpcServing, "start", boom),
    "replication": (ReplicationWorker, "start", boom),
}
CHAIN_STEPS: dict[str, tuple[Any, str, Callable[..., Any]]] = {
    "chain_connect": (bootstrap, "connect_chain", boom),
    "chain_registry": (bootstrap, "chain_registry", boom),
    "chain_services": (ChainServices, "start", boom),
    "claim_database": (bootstrap, "claim_database", boom),
    "replication": (ReplicationWorker, "start", boom),
}


async def _node_connections(pg_cluster: PgCluster, dsn: str) -> int:
    database = urlsplit(dsn).path.lstrip("/")
    conn = await asyncpg.connect(pg_cluster.dsn())
    try:
        count: int = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", database
        )
        return count
    finally:
        await conn.close()


async def _assert_released(
    pg_cluster: PgCluster, dsn: str, settings: Settings, before: set[asyncio.Task[Any]]
) -> None:
    left: list[object] = []

    async def released() -> bool:
        connections = await _node_connections(pg_cluster, dsn)
        tasks = new_tasks(before)
        ports = bound([settings.listen_address, settings.metrics_address])
        left[:] = [connections, tasks, ports]
        return not (connections or tasks or ports)

    try:
        await eventually(released, 10, "the start-up's parts released")
    except AssertionError:
        pytest.fail(f"left behind: {left[0]} connections, tasks {left[1]}, ports {left[2]}")


def _settings(dsn: str, spec: NodeSpec, **extra: Any) -> Settings:
    return Settings(
        **node_settings(
            dsn,
            spec,
            listen_address=f"127.0.0.1:{free_port()}",
            metrics_address=f"127.0.0.1:{free_port()}",
            **extra,
        )
    )


@pytest.mark.parametrize("step", list(STEPS))
async def test_a_failed_start_up_step_releases_what_started_before_it(
    step: str,
    database: str,
    node_spec: NodeSpec,
    pg_cluster: PgCluster,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    target, name, failing = STEPS[step]
    monkeypatch.setattr(target, name, failing)
    settings = _settings(database, node_spec)
    before = running_tasks()
    with pytest.raises(Injected):
        await start_node(settings)
    await _assert_released(pg_cluster, database, settings, before)


async def test_a_started_node_stops_without_leftovers(
    database: str, node_spec: NodeSpec, pg_cluster: PgCluster
) -> None:
    settings = _settings(database, node_spec)
    before = running_tasks()
    node = await start_node(settings)
    assert await _node_connections(pg_cluster, database) > 0
    assert bound([settings.listen_address, settings.metrics_address]) == [
        settings.listen_address,
        settings.metrics_address,
    ]
    await node.stop()
    await _assert_released(pg_cluster, database, settings, before)


@pytest.mark.parametrize("step", list(CHAIN_STEPS))
async def test_a_failed_chain_start_up_step_releases_what_started_before_it(
    step: str,
    database: str,
    node_spec: NodeSpec,
    pg_cluster: PgCluster,
    chain_env: ChainEnv,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    chain_env.register(node_spec)
    target, name, failing = CHAIN_STEPS[step]
    monkeypatch.setattr(target, name, failing)
    settings = _settings(database, node_spec, **chain_env.settings())
    before = running_tasks()
    with pytest.raises(Injected):
        await start_node(settings)
    await _assert_released(pg_cluster, database, settings, before)
