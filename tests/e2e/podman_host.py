"""Podman on the test machine (issue 13's facts: Debian's podman with runc, no registry):
the tools installed with apt when missing, and commands that fail the test with their output."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

TOOLS = {"podman": "podman", "runc": "runc", "debootstrap": "debootstrap"}


def run(cmd: list[str], env: dict[str, str], timeout: float = 300) -> str:
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return done.stdout


def install_tools(tools: dict[str, str] = TOOLS) -> None:
    """apt-get installs what is missing ({command: package}); fails clearly where that is
    impossible."""
    missing = [pkg for tool, pkg in tools.items() if shutil.which(tool) is None]
    if not missing:
        return
    if os.geteuid() != 0:
        pytest.fail(f"container test needs {missing}: run as root or `apt-get install {missing}`")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", *missing]):
        run(cmd, env, timeout=900)
