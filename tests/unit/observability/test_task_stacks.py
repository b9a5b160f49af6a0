"""Where pending tasks wait, read from their coroutines' frames."""

from __future__ import annotations

import asyncio

from xnode.observability.task_stacks import pending_task_stacks


async def test_a_pending_task_is_shown_where_it_waits() -> None:
    async def inner_wait() -> None:
        await asyncio.Event().wait()

    async def outer() -> None:
        await inner_wait()

    task = asyncio.create_task(outer(), name="waiting-one")
    await asyncio.sleep(0)
    stacks = pending_task_stacks()
    task.cancel()
    assert "--- task waiting-one" in stacks
    outer_at = stacks.index("<locals>.outer")
    assert stacks.index("<locals>.inner_wait") > outer_at  # the chain down to the await
    assert "in Event.wait" in stacks
