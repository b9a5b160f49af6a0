"""A network for real clients: nodes 100, 200, 300 on the chain registry (anvil), each with
its own metrics endpoint, and two `xnode gateway` processes in front of them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import ChainEnv
from tests.e2e import image_builds
from tests.e2e.podman_host import docker_api, install_tools, podman_env
from tests.e2e.replication.conftest import ChainNetwork, chain_network
from tests.support.failure_logs import print_logs_if_failed
from xnode.core.crypto import SigningKey
from xnode.devtools.certs import CertAuthority
from xnode.devtools.devnet import GATEWAY_ADDRESS, GATEWAY_READ_LIMITS, wait_serving
from xnode.devtools.postgres import free_port
from xnode.tls import ClientTls

__all__ = [
    "chain_network",
    "docker_api",
    "node_sdk_image",
    "tls_gateways",
]  # the fixtures, shared with other tests

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


@dataclass
class TlsGateway:
    """A gateway serving TLS on its gRPC and HTTP ports with a certificate of a private CA
    (`ca_file`), in front of the nodes on loopback; with `api_key`, publishes need it."""

    process: GatewayProcess
    http_address: str
    ca_file: Path
    api_key: str | None

    @property
    def url(self) -> str:
        return f"https://{self.process.address}"

    @property
    def http_url(self) -> str:
        return f"https://{self.http_address}"


@pytest.fixture
def tls_gateways(
    chain_network: ChainNetwork, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[[str | None], TlsGateway]]:
    """Starts nodes 100, 200, 300 (plaintext, on loopback) and then, for each call, a gateway
    over TLS (one CA for all), with that API key or none."""
    for node_id in chain_network.addresses:
        chain_network.start(node_id, **BEHIND_GATEWAYS)
    ca = CertAuthority.create("xnode test CA")
    ca_file = tmp_path / "ca.pem"
    ca_file.write_bytes(ca.pem)
    started: list[GatewayProcess] = []

    def start(api_key: str | None) -> TlsGateway:
        index = len(started)
        cert_file, key_file = ca.issue_files(tmp_path, f"gateway-{index}")
        http_address = f"127.0.0.1:{free_port()}"
        keys = {"XNODE_GATEWAY_API_KEYS": f"app={api_key}"} if api_key else {}
        gateway = _spawn_gateway(
            chain_network.chain,
            tmp_path,
            index,
            XNODE_GATEWAY_TLS_CERT_FILE=str(cert_file),
            XNODE_GATEWAY_TLS_KEY_FILE=str(key_file),
            XNODE_GATEWAY_HTTP_LISTEN_ADDRESS=http_address,
            XNODE_GATEWAY_HTTP_CORS_ORIGINS="*",
            **keys,
        )
        started.append(gateway)
        tls = TlsGateway(gateway, http_address, ca_file, api_key)
        if not wait_serving(tls.url, 60, ClientTls.from_files(ca_file)):
            pytest.fail(f"xnode gateway did not start serving:\n{gateway.output()[-3000:]}")
        return tls

    yield start
    for gateway in started:
        gateway.proc.kill()
        gateway.proc.wait(30)
    print_logs_if_failed(request, [g.log for g in started])


@pytest.fixture(scope="module")
def node_sdk_image() -> str:
    """The Node SDK's image, built (or found) by scripts/build_node_sdk_image.sh."""
    image_builds.wait()
    install_tools()
    started = time.monotonic()
    out = image_builds.build(image_builds.NODE_SDK, podman_env(), timeout=1500)
    print(f"node sdk image: {time.monotonic() - started:.0f} s")
    return out.strip().splitlines()[-1]
