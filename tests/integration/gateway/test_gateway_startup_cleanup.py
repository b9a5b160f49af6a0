"""A gateway start-up step that fails releases everything started before it: no task of it
keeps running, its gRPC, HTTP and metrics ports are free, no connection to a node or to the
chain stays open; a started gateway stops the same way."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.conftest import ChainEnv, Network, NodeProcess
from tests.support.leftovers import (
    Injected,
    boom,
    boom_sync,
    bound,
    connections_to,
    new_tasks,
    running_tasks,
)
from tests.support.waiting import eventually
from xnode.core.crypto import SigningKey
from xnode.devtools.postgres import free_port
from xnode.gateway import server as gateway_server
from xnode.gateway.node_health import NodeHealth
from xnode.gateway.settings import GatewaySettings
from xnode.gateway.usage import UsageLog
from xnode.server import bootstrap, serving
from xnode.static_registry import StaticRegistrySource

# step -> (object, attribute) replaced by a failing callable, in start-up order
STEPS: dict[str, tuple[Any, str, Callable[..., Any]]] = {
    "metrics": (serving, "serve_metrics", boom_sync),
    "registry": (gateway_server, "open_registry", boom),
    "registry_start": (StaticRegistrySource, "start", boom),
    "usage_log": (UsageLog, "__init__", boom_sync),
    "grpc_server_bind": (gateway_server, "bind", boom_sync),
    "http": (serving, "serve_http", boom),
    "grpc_server_start": (serving.GrpcServing, "start", boom),
    "node_health": (NodeHealth, "start", boom_sync),
}
CHAIN_STEPS: dict[str, tuple[Any, str, Callable[..., Any]]] = {
    "chain_connect": (bootstrap, "connect_chain", boom),
    "chain_registry": (bootstrap, "chain_registry", boom),
    "grpc_server_start": (serving.GrpcServing, "start", boom),
    "node_health": (NodeHealth, "start", boom_sync),
}


def _settings(**extra: Any) -> GatewaySettings:
    return GatewaySettings(
        listen_address=f"127.0.0.1:{free_port()}",
        http_listen_address=f"127.0.0.1:{free_port()}",
        metrics_address=f"127.0.0.1:{free_port()}",
        payer_key=SigningKey.generate().hex(),
        node_check_seconds=0.05,
        **extra,
    )


def _file_registry(network: Network) -> dict[str, Any]:
    return {"nodes_file": network.spec.nodes_file, "registry_source": "file"}


def _ports(network: Network, chain: ChainEnv | None = None) -> list[int]:
    ports = [int(a.rpartition(":")[2]) for a in network.addresses.values()]
    if chain is not None:
        ports.append(int(urlsplit(chain.url).port or 0))
    return ports


async def _assert_released(
    settings: GatewaySettings, ports: list[int], before: Any, connections: int = 0
) -> None:
    """`connections`: how many to `ports` the test itself holds (web3's to anvil)."""
    left: dict[str, object] = {}

    def released() -> bool:
        left["tasks"] = new_tasks(before)
        left["ports"] = bound(
            [settings.listen_address, settings.http_listen_address, settings.metrics_address]
        )
        left["connections"] = connections_to(ports) - connections
        return not any(left.values())

    try:
        await eventually(released, 10, "the gateway's parts released")
    except AssertionError:
        pytest.fail(f"left behind: {left}")


@pytest.mark.parametrize("step", list(STEPS))
async def test_a_failed_gateway_start_up_step_releases_what_started_before_it(
    step: str, network: Network, monkeypatch: pytest.MonkeyPatch
) -> None:
    target, name, failing = STEPS[step]
    monkeypatch.setattr(target, name, failing)
    settings = _settings(**_file_registry(network))
    before = running_tasks()
    with pytest.raises(Injected):
        await gateway_server.start_gateway(settings)
    await _assert_released(settings, _ports(network), before)


async def test_a_started_gateway_stops_without_leftovers(
    network: Network, spawn_node: Callable[..., NodeProcess]
) -> None:
    # A node of its own process (an in-process one starts tasks of its own all along).
    # Listening on the registry's address, which `spawn_node` does not wait on: the gateway's
    # channel below shows it serves.
    address = network.addresses[100]
    spawn_node(network.dsns[100], network.spec, 100, wait=False, listen_address=address)
    settings = _settings(**_file_registry(network))
    before = running_tasks()
    gateway = await gateway_server.start_gateway(settings)
    # Its health checks hold a connection to the running node; all three ports are bound.
    await eventually(lambda: connections_to(_ports(network)) > 0, 60, "a node channel")
    assert (
        len(bound([gateway.address, str(gateway.http_address), str(gateway.metrics_address)])) == 3
    )
    await gateway.stop()
    await _assert_released(settings, _ports(network), before)


@pytest.mark.parametrize("step", list(CHAIN_STEPS))
async def test_a_failed_gateway_chain_start_up_step_releases_what_started_before_it(
    step: str,
    network: Network,
    chain_env: ChainEnv,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    chain_env.register(network.spec, network.addresses)
    target, name, failing = CHAIN_STEPS[step]
    monkeypatch.setattr(target, name, failing)
    settings = _settings(
        chain_rpc_url=chain_env.url,
        contracts_file=chain_env.contracts_file,
        registry_source="chain",
        chain_poll_seconds=0.05,
    )
    before, held = running_tasks(), connections_to(_ports(network, chain_env))
    with pytest.raises(Injected):
        await gateway_server.start_gateway(settings)
    await _assert_released(settings, _ports(network, chain_env), before, held)
