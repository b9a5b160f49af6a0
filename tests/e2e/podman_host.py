"""Podman on the test machine (Debian's podman 4.3 with runc, no registry): the tools
installed with apt when missing, commands that fail the test with their output, and podman's
Docker-compatible API for testcontainers (docs/testing.md)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from filelock import FileLock
from testcontainers.core.docker_client import DockerClient

from tests.support.waiting import wait_until

TOOLS = {"podman": "podman", "runc": "runc", "debootstrap": "debootstrap"}
REPO = Path(__file__).resolve().parents[2]
# runc (crun fails on hybrid cgroups), no default rlimits, cgroupfs: docker/containers.conf.
CONTAINERS_CONF = str(REPO / "docker" / "containers.conf")
# apt-get and image builds from two test workers at once would collide (dpkg's lock, podman's
# store): each takes this machine-wide lock first. Reentrant within a thread, and a thread
# that does not hold it waits.
HOST_LOCK = FileLock(Path(tempfile.gettempdir()) / "xnode-podman-host.lock")


def podman_env() -> dict[str, str]:
    """The environment podman commands (and its API service) run with."""
    return {**os.environ, "CONTAINERS_CONF": os.environ.get("CONTAINERS_CONF", CONTAINERS_CONF)}


def run(cmd: list[str], env: dict[str, str], timeout: float = 300) -> str:
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return done.stdout


def install_tools(tools: dict[str, str] = TOOLS) -> None:
    """apt-get installs what is missing ({command: package}); fails clearly where that is
    impossible."""
    with HOST_LOCK:
        _install_missing(tools)


def _install_missing(tools: dict[str, str]) -> None:
    missing = [pkg for tool, pkg in tools.items() if shutil.which(tool) is None]
    if not missing:
        return
    if os.geteuid() != 0:
        pytest.fail(f"container test needs {missing}: run as root or `apt-get install {missing}`")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", *missing]):
        run(cmd, env, timeout=900)


def _answers(client: DockerClient) -> bool:
    try:
        return bool(client.client.ping())
    except Exception:  # the service is not listening yet
        return False


@pytest.fixture(scope="session")
def docker_api() -> Iterator[DockerClient]:
    """`podman system service` on a socket of its own, as the Docker API testcontainers
    talks to (DOCKER_HOST). The reaper (Ryuk) is off: its image is on a registry CI does not
    reach, and each test removes the containers it starts."""
    install_tools()
    directory = Path(tempfile.mkdtemp(prefix="xnode-podman-"))
    socket = directory / "podman.sock"
    log = directory / "service.log"
    service = subprocess.Popen(
        ["podman", "system", "service", "--time=0", f"unix://{socket}"],
        env=podman_env(),
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    patch = pytest.MonkeyPatch()
    patch.setenv("DOCKER_HOST", f"unix://{socket}")
    patch.setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
    try:
        try:
            wait_until(socket.exists, 30, "podman's API socket")
            client = DockerClient()
            wait_until(lambda: _answers(client), 30, "podman's API answering")
        except AssertionError as exc:
            pytest.fail(f"{exc}; `podman system service` said:\n{log.read_text()[-3000:]}")
        yield client
    finally:
        patch.undo()
        service.terminate()
        service.wait(30)
        shutil.rmtree(directory, ignore_errors=True)
