"""A network for real clients: nodes 100, 200, 300 on the chain registry (anvil), each with
its own metrics endpoint, and two `xnode gateway` processes in front of them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import ChainEnv
from tests.e2e.podman_host import docker_api
from tests.e2e.replication.conftest import ChainNetwork, chain_network
from tests.failure_logs import print_logs_if_failed
from xnode.core.crypto import SigningKey
from xnode.devtools.devnet import GATEWAY_ADDRESS, GATEWAY_READ_LIMITS, wait_serving
from xnode.devtools.postgres import free_port

__all__ = ["chain_network", "docker_api"]  # the fixtures, shared with other tests

# As `xnode devnet` runs its nodes: they believe the gateways naming their clients.
BEHIND_GATEWAYS = {**GATEWAY_READ_LIMITS, "trusted_proxies": GATEWAY_ADDRESS}


@dataclass
class GatewayProcess:
    proc: subprocess.Popen[bytes]
    address: str
    log: Path

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@dataclass
class ClientNetwork:
    nodes: ChainNetwork
    metrics: dict[int, str]
    gateways: list[GatewayProcess] = field(default_factory=list)

    def restart(self, node_id: int) -> None:
        self.nodes.start(node_id, metrics_address=self.metrics[node_id], **BEHIND_GATEWAYS)

    def signal(self, node_id: int, sig: signal.Signals) -> None:
        """SIGSTOP freezes the node's process, SIGCONT thaws it."""
        os.kill(self.nodes.processes[node_id].proc.pid, sig)


def _spawn_gateway(chain: ChainEnv, tmp_path: Path, index: int, **extra_env: str) -> GatewayProcess:
    address = f"127.0.0.1:{free_port()}"
    log = tmp_path / f"gateway-{index}.log"
    env = {
        **os.environ,
        "XNODE_GATEWAY_LISTEN_ADDRESS": address,
        "XNODE_GATEWAY_PAYER_KEY": SigningKey.generate().hex(),
        "XNODE_GATEWAY_CHAIN_RPC_URL": chain.url,
        "XNODE_GATEWAY_CONTRACTS_FILE": str(chain.contracts_file),
        "XNODE_GATEWAY_REGISTRY_SOURCE": "chain",
        "XNODE_GATEWAY_CHAIN_POLL_SECONDS": "0.1",
        "XNODE_GATEWAY_NODE_DOWN_SECONDS": "30",
        "XNODE_GATEWAY_LOG_FORMAT": "json",
        **extra_env,
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "xnode.cli", "gateway"],
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    return GatewayProcess(proc, address, log)


@pytest.fixture
def client_network(
    chain_network: ChainNetwork, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[ClientNetwork]:
    """Started: three nodes and two gateways. Fails (never skips) when one cannot start."""
    metrics = {n: f"127.0.0.1:{free_port()}" for n in chain_network.addresses}
    for node_id, address in metrics.items():
        chain_network.start(node_id, metrics_address=address, **BEHIND_GATEWAYS)
    network = ClientNetwork(chain_network, metrics)
    for index in range(2):
        gateway = _spawn_gateway(chain_network.chain, tmp_path, index)
        network.gateways.append(gateway)
        if not wait_serving(gateway.address, 60):
            pytest.fail(f"xnode gateway did not start serving:\n{gateway.output()[-3000:]}")
    yield network
    for gateway in network.gateways:
        if gateway.proc.poll() is None:
            gateway.proc.kill()
            gateway.proc.wait(30)
    print_logs_if_failed(request, [g.log for g in network.gateways])
