"""Structured concurrency for the node's fan-outs, and what its stop reports when a part
overruns.

`asyncio.gather` returns at the first failure and leaves the other awaitables running,
detached: a local read then keeps (or waits for) a pool connection that nobody awaits, and a
stopping node's `Pool.close()` waits for it. `all_or_cancel` cancels and awaits the others
before the first failure propagates, so nothing it started outlives it."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

T = TypeVar("T")


async def all_or_cancel(*coros: Coroutine[Any, Any, T]) -> list[T]:
    """The results in order, like `asyncio.gather`; when one fails, the others are cancelled
    and have ended before its error (the first, unwrapped from the task group's) is raised."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(c) for c in coros]
    except BaseExceptionGroup as failed:
        # Callers handle the error one coroutine raised (a peer's UNAVAILABLE), not a group.
        raise failed.exceptions[0] from None
    return [t.result() for t in tasks]


def task_stacks(tasks: Iterable[asyncio.Task[Any]], limit: int = 20) -> str:
    """Each task's name, coroutine and stack (innermost `limit` frames): what a stuck stop
    or a test timeout is waiting on."""
    out = io.StringIO()
    for task in sorted(tasks, key=lambda t: t.get_name()):
        out.write(f"--- {task.get_name()}: {task.get_coro()!r}\n")
        task.print_stack(limit=limit, file=out)
    return out.getvalue()
