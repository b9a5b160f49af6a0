"""Waiting on conditions with deadlines: the one way tests wait for something to happen.

A test never sleeps a fixed time to let something happen; it polls a condition until it holds
and fails, saying what it waited for, once the deadline passes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

# Generous: a condition that holds returns at once, so only a failing test pays for the margin,
# and CI machines are busy.
WITHIN_S = 30.0
POLL_S = 0.05


async def eventually(
    check: Callable[[], Awaitable[bool] | bool], within_s: float = WITHIN_S, what: str = ""
) -> None:
    """Polls `check` (a coroutine function or a plain one) until it returns true."""
    deadline = time.monotonic() + within_s
    while True:
        held = check()
        if not isinstance(held, bool):
            held = await held
        if held:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{what or 'condition'} not met within {within_s:g} s")
        await asyncio.sleep(POLL_S)


async def eventually_value(
    probe: Callable[[], Awaitable[T]],
    ok: Callable[[T], bool],
    within_s: float = WITHIN_S,
    what: str = "",
) -> T:
    """Polls `probe` until `ok(value)` and returns that value; fails with the last one seen."""
    deadline = time.monotonic() + within_s
    while True:
        value = await probe()
        if ok(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{what or 'condition'} not met within {within_s:g} s; last value: {value!r}"
            )
        await asyncio.sleep(POLL_S)


def wait_until(
    check: Callable[[], bool],
    within_s: float = WITHIN_S,
    what: str = "",
    why: Callable[[], str] | None = None,
) -> None:
    """The same for code that is not async (subprocesses, files, clusters). `why`: what to
    add to the failure (a log's tail)."""
    deadline = time.monotonic() + within_s
    while not check():
        if time.monotonic() > deadline:
            detail = f"\n{why()}" if why is not None else ""
            raise AssertionError(f"{what or 'condition'} not met within {within_s:g} s{detail}")
        time.sleep(POLL_S)
