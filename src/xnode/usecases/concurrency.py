"""Structured concurrency for the node's fan-outs, and a stop that cannot hang.

`asyncio.gather` returns at the first failure and leaves the other awaitables running,
detached: a local read then keeps (or waits for) a pool connection that nobody awaits, and a
stopping node's `Pool.close()` waits for it. `all_or_cancel` cancels and awaits the others
before the first failure propagates, so nothing it started outlives it.

`StopSteps` runs a node's cleanup (its parts' stops in reverse start order) with a deadline
on each step: one that overruns is logged once, `node_stop_step_overran`, naming the step,
with the stack of every task still pending (what it waits on, read by
xnode.observability.task_stacks), then forced.

A loop that runs until cancelled calls `end_if_cancelled` after each step: grpc.aio can absorb
a task's cancel (the awaited call returns or fails as if nothing happened), and the loop
would then go on, its stop waiting for it until the deadline."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from contextlib import AsyncExitStack
from typing import Any, ParamSpec, Self, TypeVar

import structlog

from xnode.observability.task_stacks import pending_task_stacks

log = structlog.get_logger(__name__)

T = TypeVar("T")
P = ParamSpec("P")

# A step still running this long after it was forced (cancelled, its `force` called) is left
# behind so the steps after it (the pool's close above all) still run.
FORCED_GRACE_S = 5.0


def end_if_cancelled() -> None:
    """Raises CancelledError when the current task was cancelled, even if no CancelledError
    reached it (one absorbed by grpc.aio or a cleanup)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def all_or_cancel(*coros: Coroutine[Any, Any, T]) -> list[T]:
    """The results in order, like `asyncio.gather`; when one fails, the others are cancelled
    and have ended before its error is raised (the first in argument order, unwrapped).

    Not an asyncio.TaskGroup: on Python 3.11 a group whose child fails leaves the caller's
    task marked as cancelled (`cancelling()` stays 1), and a cancel that comes while the group
    aborts is swallowed, so the caller's loop runs on past its stop."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        await _cancel_and_wait(tasks)
    errors = [t.exception() for t in tasks if not t.cancelled()]
    failed = next((e for e in errors if e is not None), None)
    if failed is not None:
        raise failed
    return [t.result() for t in tasks]  # one cancelled from elsewhere raises CancelledError


async def _cancel_and_wait(tasks: Sequence[asyncio.Future[Any]]) -> None:
    """Cancels what is still running and waits for it to end, also when cancelled meanwhile
    (the cancel is raised after)."""
    pending = [t for t in tasks if not t.done()]
    for task in pending:
        task.cancel()
    cancelled = False
    while pending:
        try:
            await asyncio.wait(pending)
        except asyncio.CancelledError:
            cancelled = True
        pending = [t for t in pending if not t.done()]
    if cancelled:
        raise asyncio.CancelledError


def _step_name(callback: Callable[..., object]) -> str:
    """E.g. 'ReplicationWorker.stop', 'Pool.close'."""
    inner = callback.func if isinstance(callback, functools.partial) else callback
    return str(getattr(inner, "__qualname__", None) or repr(inner))


def _retrieve(task: asyncio.Task[Any]) -> None:
    """A step left behind may still fail: its error was logged with the overrun already."""
    if not task.cancelled():
        task.exception()


async def bounded_step(
    name: str,
    step: Callable[[], Awaitable[object]],
    deadline_s: float,
    force: Callable[[], object] | None = None,
) -> None:
    """Runs `step` in its own task (its stack can be read while it still waits); past
    `deadline_s`, logs `node_stop_step_overran` once with every pending task's stack, then
    forces it: cancelled, and `force` called (e.g. asyncpg's Pool.terminate). If it has still
    not ended FORCED_GRACE_S later it is left behind (`node_stop_step_abandoned`)."""

    async def run() -> None:
        await step()

    task = asyncio.create_task(run(), name=f"stop:{name}")
    try:
        done, _ = await asyncio.wait([task], timeout=deadline_s)
        if done:
            task.result()  # its error, as the exit stack would have had it
            return
        log.error(
            "node_stop_step_overran",
            step=name,
            deadline_s=deadline_s,
            pending_tasks=pending_task_stacks(),
        )
        task.add_done_callback(_retrieve)
        task.cancel()
        if force is not None:
            force()
        ended, _ = await asyncio.wait([task], timeout=FORCED_GRACE_S)
        if not ended:
            log.error("node_stop_step_abandoned", step=name, waited_s=FORCED_GRACE_S)
    except asyncio.CancelledError:
        task.cancel()  # the stop itself was cancelled: the step goes with it
        raise


class StopSteps(AsyncExitStack):
    """An exit stack whose async callbacks (a node's stop steps) each run under
    `deadline_s` (bounded_step); `push_step` adds one with its own way to force it."""

    def __init__(self, deadline_s: float = 30.0) -> None:
        super().__init__()
        self.deadline_s = deadline_s

    def pop_all(self) -> Self:
        moved = super().pop_all()
        moved.deadline_s = self.deadline_s
        return moved

    def push_async_callback(
        self, callback: Callable[P, Awaitable[T]], /, *args: P.args, **kwds: P.kwargs
    ) -> Callable[P, Awaitable[T]]:
        self.push_step(functools.partial(callback, *args, **kwds), _step_name(callback))
        return callback

    def push_step(
        self,
        step: Callable[[], Awaitable[object]],
        name: str | None = None,
        force: Callable[[], object] | None = None,
    ) -> None:
        super().push_async_callback(
            bounded_step, name or _step_name(step), step, self.deadline_s, force
        )


class Repeating:
    """Awaits `step` every `interval_s` (after the step before ends) in a task of its own,
    from `start` until `stop`."""

    def __init__(self, step: Callable[[], Awaitable[None]], interval_s: float, name: str) -> None:
        self._step = step
        self._interval_s = interval_s
        self._name = name
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=self._name)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            await self._step()
            end_if_cancelled()
