"""The container images some end-to-end tests run, built in the background from the start of
the session. On a fresh machine the builds take minutes (debootstrap, npm, podman), mostly
waiting on downloads and disks: begun at collection, they overlap the tests that run first
instead of adding to the suite's time. A fixture that needs an image waits for the
background build, then runs its own build script, which finds the image made and returns
at once (or, when the background build failed, fails the test with the script's words)."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

from tests.e2e.podman_host import HOST_LOCK, REPO, install_tools, podman_env, run

# The modules whose fixtures build images, and the builds they need, in the order tests run.
NODE_SDK = ["bash", str(REPO / "scripts" / "build_node_sdk_image.sh")]
NODE_IMAGES = ["bash", str(REPO / "scripts" / "build_image.sh")]
NODE_IMAGES_ENV = {"XNODE_IMAGES": "node anvil postgres"}  # no test runs the Patroni image
USERS = {
    "tests/e2e/clients/test_node_sdk.py": "node_sdk",
    "tests/e2e/ops/test_container.py": "node",
}

_done = threading.Event()
_thread: threading.Thread | None = None


def _build(which: list[str], log: Path) -> None:
    try:
        install_tools()
    except BaseException:
        return
    with HOST_LOCK, log.open("ab") as out:
        for name in which:
            cmd, extra = (NODE_SDK, {}) if name == "node_sdk" else (NODE_IMAGES, NODE_IMAGES_ENV)
            subprocess.run(cmd, env={**podman_env(), **extra}, stdout=out, stderr=out, timeout=1800)


def start(node_ids: list[str], log: Path) -> None:
    """Starts building, in a thread, the images the collected tests need."""
    global _thread
    files = {node_id.partition("::")[0] for node_id in node_ids}
    which = [name for path, name in USERS.items() if path in files]
    if not which or _thread is not None:
        _done.set()
        return

    def run() -> None:
        try:
            _build(which, log)
        finally:
            _done.set()

    _thread = threading.Thread(target=run, name="image-builds", daemon=True)
    _thread.start()


def wait(timeout_s: float = 1800) -> None:
    """Returns once the background builds ended (at once when none was started)."""
    _done.wait(timeout_s)


def build(cmd: list[str], env: dict[str, str], timeout: float) -> str:
    """Runs an image's build script (which returns at once when the image is made), taking
    turns with the other test workers' builds."""
    with HOST_LOCK:
        return run(cmd, env, timeout)
