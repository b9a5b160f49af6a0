"""When pytest-timeout fires in an asyncio test, the output names the coroutine the test
waits on (tests/support/timeout_tasks.py), not only the threads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HANGING = """
import asyncio

import pytest


async def wait_for_a_release_that_never_comes() -> None:
    await asyncio.Event().wait()


@pytest.mark.asyncio
async def test_hangs() -> None:
    task = asyncio.create_task(wait_for_a_release_that_never_comes(), name="stuck-release")
    await task
"""


def test_a_timed_out_asyncio_test_prints_where_its_tasks_wait(tmp_path: Path) -> None:
    (tmp_path / "test_hanging.py").write_text(HANGING)
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root)])}
    plugin = ["-p", "no:cacheprovider", "-p", "tests.support.timeout_tasks", "--timeout", "2"]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *plugin, "test_hanging.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "Timeout (>2.0s) from pytest-timeout" in out
    assert "asyncio tasks (pending)" in out
    assert "--- task stuck-release" in out
    assert "in wait_for_a_release_that_never_comes" in out
