"""Where an event loop's tasks wait: each pending task's chain of awaits, read from its
coroutines' frames. What a stop step that overruns logs, and what a test that times out
prints (Task.get_stack shows a suspended coroutine's outermost frame only)."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Iterable
from types import CoroutineType, FrameType, GeneratorType
from typing import Any

STACK_FRAMES = 12  # innermost frames shown per task: where it waits, and what called that


def _frame_of(awaitable: object) -> FrameType | None:
    for attribute in ("cr_frame", "gi_frame", "ag_frame"):
        frame = getattr(awaitable, attribute, None)
        if isinstance(frame, FrameType):
            return frame
    return None


def _awaited_by(awaitable: object) -> object:
    for attribute in ("cr_await", "gi_yieldfrom", "ag_await"):
        found = getattr(awaitable, attribute, None)
        if found is not None:
            return found
    return None


def _described(awaited: object) -> str:
    # A future's iterator does not say which future (the frame above shows the await).
    return "a future" if type(awaited).__name__ == "FutureIter" else repr(awaited)


def await_chain(task: asyncio.Task[Any]) -> list[str]:
    """Where `task` waits: each coroutine it awaits through, outermost first, down to the
    innermost await (Task.get_stack shows a suspended coroutine's outermost frame only)."""
    lines: list[str] = []
    current: object = task.get_coro()
    while current is not None:
        frame = _frame_of(current)
        if frame is None:  # a future, or a coroutine compiled to C (asyncpg, grpc)
            lines.append(f"    awaiting {_described(current)}")
            break
        code = frame.f_code
        lines.append(f'  File "{code.co_filename}", line {frame.f_lineno}, in {code.co_qualname}')
        nested = _awaited_by(current)
        if nested is None or not isinstance(nested, CoroutineType | GeneratorType):
            if nested is not None:
                lines.append(f"    awaiting {_described(nested)}")
            break
        current = nested
    return lines[-STACK_FRAMES:]


def task_stacks(tasks: Iterable[asyncio.Task[Any]]) -> str:
    """Each pending task's name and where it waits: what a stuck stop or a test timeout is
    waiting on."""
    out = io.StringIO()
    for task in sorted(tasks, key=lambda t: t.get_name()):
        if task.done():
            continue
        out.write(f"--- task {task.get_name()}\n")
        for line in await_chain(task):
            out.write(line + "\n")
    return out.getvalue()


def pending_task_stacks(loop: asyncio.AbstractEventLoop | None = None) -> str:
    """task_stacks of every task of `loop` (the running one) but the one asking."""
    loop = loop or asyncio.get_running_loop()
    asking = asyncio.current_task(loop)
    return task_stacks(t for t in asyncio.all_tasks(loop) if t is not asking)
