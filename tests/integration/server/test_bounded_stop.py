"""A node's stop always ends: a stop step that would hang (a task holding a pool connection,
a replication task that does not end on its one cancel) is logged once, naming the step,
with the stacks of the tasks still pending, and forced; the steps after it still run."""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from typing import Any

from structlog.testing import capture_logs

from tests.conftest import Network
from xnode.server.wiring import Node

BOUND = {"shutdown_grace_seconds": 0.0, "stop_step_seconds": 1.0}
# Far above the bound (1 s per step, 5 s more for a forced one): the stop did not hang.
STOPPED_WITHIN_S = 60


def overruns(logged: list[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    return [e for e in logged if e["event"] == "node_stop_step_overran"]


async def test_a_task_holding_a_pool_connection_cannot_hang_the_stop(
    start_node: Any, network: Network
) -> None:
    node: Node = await start_node(**network.settings(100, **BOUND))
    held = asyncio.Event()

    async def hold_a_connection() -> None:
        async with node.pool.acquire():
            held.set()
            await asyncio.Event().wait()  # never released: Pool.close() would wait forever

    holder = asyncio.create_task(hold_a_connection(), name="holder")
    await asyncio.wait_for(held.wait(), STOPPED_WITHIN_S)
    try:
        with capture_logs() as logged:
            await asyncio.wait_for(node.stop(), STOPPED_WITHIN_S)
    finally:
        holder.cancel()
        await asyncio.wait([holder])
    [event] = overruns(logged)
    assert event["step"] == "Pool.close"
    assert "--- task holder" in event["pending_tasks"]
    assert "hold_a_connection" in event["pending_tasks"]  # where it waits, by name
    assert node.pool.is_closing()  # terminated
    assert [e["event"] for e in logged][-1] == "node_stopped"
    assert not [e for e in logged if e["event"] == "node_stop_step_abandoned"]


async def test_a_replication_task_ignoring_its_cancel_cannot_hang_the_stop(
    start_node: Any, network: Network
) -> None:
    node: Node = await start_node(**network.settings(100, **BOUND))
    assert node.replication is not None
    cancels = 0

    async def stubborn() -> None:
        nonlocal cancels
        while True:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancels += 1
                if cancels > 1:
                    raise  # only the forced stop's second cancel ends it

    task = node.replication.spawn_coroutine(stubborn(), "stubborn")
    with capture_logs() as logged:
        await asyncio.wait_for(node.stop(), STOPPED_WITHIN_S)
    [event] = overruns(logged)
    assert event["step"] == "ReplicationWorker.stop"
    assert "--- task stubborn" in event["pending_tasks"]
    assert "<locals>.stubborn" in event["pending_tasks"]  # where it waits
    assert task.done() and cancels == 2
    assert [e["event"] for e in logged][-1] == "node_stopped"
