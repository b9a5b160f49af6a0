"""A pytest plugin (loaded by tests/conftest.py): when pytest-timeout fires, the stacks of
the running event loop's asyncio tasks are printed before its thread stacks, so that a hung
test or teardown names the coroutine it waits on (the threads alone show only the loop
idling in select)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Generator
from types import FrameType
from typing import Any

import pytest

from xnode.observability.task_stacks import pending_task_stacks


@pytest.hookimpl(hookwrapper=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> Generator[None, Any, None]:
    yield  # pytest-timeout has set its SIGALRM handler (its "signal" method, the default)
    if settings.method != "signal":
        return
    fire = signal.getsignal(signal.SIGALRM)
    if not callable(fire):
        return

    def tasks_then_fire(signum: int, frame: FrameType | None) -> None:
        __tracebackhide__ = True
        try:
            loop = asyncio.get_running_loop()  # the signal interrupts the loop's own thread
        except RuntimeError:
            loop = None
        if loop is not None:
            terminal = item.config.get_terminal_writer()
            terminal.sep("+", title="asyncio tasks (pending)")
            terminal.write(pending_task_stacks(loop))
        fire(signum, frame)

    signal.signal(signal.SIGALRM, tasks_then_fire)
