"""A start-up step that fails releases everything started before it: no Postgres connection
of the node stays open, no task of it keeps running, its gRPC and metrics ports are free."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest

import xnode.server as server_module
from tests.conftest import ChainEnv, NodeSpec, node_settings
from xnode.chain.node import ChainServices
from xnode.config import Settings
from xnode.devtools.postgres import PgCluster, free_port
from xnode.replication.worker import ReplicationWorker
from xnode.server import start_node
from xnode.static_registry import StaticRegistrySource
from xnode.store.notifications import CommitListener
from xnode.store.sequencer import Sequencer
from xnode.usecases.health import HealthMonitor
from xnode.usecases.originator import Originator


class Injected(Exception):
    pass


async def _boom(*_args: Any, **_kwargs: Any) -> Any:
    raise Injected("injected start-up failure")


def _boom_sync(*_args: Any, **_kwargs: Any) -> Any:
    raise Injected("injected start-up failure")


# step -> (object, attribute) replaced by a failing callable, in start-up order
STEPS: dict[str, tuple[Any, str, Callable[..., Any]]] = {
    "registry": (server_module, "open_registry", _boom),
    "migrations": (server_module, "upgrade_to_head", _boom_sync),
    "pool": (server_module, "create_pool", _boom),
    "claim_database": (server_module, "claim_database", _boom),
    "sequencer_prime": (Sequencer, "prime", _boom),
    "registry_start": (StaticRegistrySource, "start", _boom),
    "commit_listener": (CommitListener, "start", _boom_sync),
    "originator": (Originator, "start", _boom_sync),
    "metrics": (server_module, "serve_metrics", _boom_sync),
    "grpc_server_bind": (server_module, "_grpc_server", _boom_sync),
    "health_monitor": (HealthMonitor, "start", _boom),
    "grpc_server_start": (server_module.GrpcServing, "start", _boom),
    "replication": (ReplicationWorker, "start", _boom),
}
CHAIN_STEPS: dict[str, tuple[Any, str, Callable[..., Any]]] = {
    "chain_connect": (server_module, "connect_chain", _boom),
    "chain_registry": (server_module, "chain_registry", _boom),
    "chain_services": (ChainServices, "start", _boom),
    "claim_database": (server_module, "claim_database", _boom),
    "replication": (ReplicationWorker, "start", _boom),
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


def _port_free(address: str) -> bool:
    host, _, port = address.rpartition(":")
    with socket.socket() as sock:
        try:
            sock.bind((host, int(port)))
        except OSError:
            return False
    return True


def _running_tasks() -> set[asyncio.Task[Any]]:
    return {t for t in asyncio.all_tasks() if not t.done()}


async def _assert_released(
    pg_cluster: PgCluster, dsn: str, settings: Settings, before: set[asyncio.Task[Any]]
) -> None:
    deadline = time.monotonic() + 10
    while True:
        connections = await _node_connections(pg_cluster, dsn)
        tasks = _running_tasks() - before - {asyncio.current_task()}
        ports = [
            a for a in (settings.listen_address, settings.metrics_address) if not _port_free(a)
        ]
        if not (connections or tasks or ports):
            return
        if time.monotonic() > deadline:
            pytest.fail(f"left behind: {connections} connections, tasks {tasks}, ports {ports}")
        await asyncio.sleep(0.1)


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
    before = _running_tasks()
    with pytest.raises(Injected):
        await start_node(settings)
    await _assert_released(pg_cluster, database, settings, before)


async def test_a_started_node_stops_without_leftovers(
    database: str, node_spec: NodeSpec, pg_cluster: PgCluster
) -> None:
    settings = _settings(database, node_spec)
    before = _running_tasks()
    node = await start_node(settings)
    assert await _node_connections(pg_cluster, database) > 0
    assert not _port_free(settings.listen_address) and not _port_free(settings.metrics_address)
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
    before = _running_tasks()
    with pytest.raises(Injected):
        await start_node(settings)
    await _assert_released(pg_cluster, database, settings, before)
