"""all_or_cancel leaves nothing running after a failure, and the caller's task as it was;
StopSteps bounds each stop step, logs an overrun once with where the pending tasks wait,
forces it, and keeps the exit stack's order and errors otherwise; Repeating ends even when
its step absorbs the cancel."""

from __future__ import annotations

import asyncio

import pytest
from structlog.testing import capture_logs

from xnode.usecases import concurrency
from xnode.usecases.concurrency import Repeating, StopSteps, all_or_cancel


class PeerDown(Exception):
    pass


async def test_all_or_cancel_returns_the_results_in_order() -> None:
    async def value(v: int, delay: float) -> int:
        await asyncio.sleep(delay)
        return v

    assert await all_or_cancel(value(1, 0.02), value(2, 0)) == [1, 2]


async def test_a_failure_cancels_and_ends_the_others_before_it_propagates() -> None:
    ended: list[str] = []

    async def slow_local_read() -> int:
        try:
            await asyncio.Event().wait()
        finally:
            ended.append("local read")
        return 0

    async def failing_peer() -> int:
        await asyncio.sleep(0)
        raise PeerDown("UNAVAILABLE")

    with pytest.raises(PeerDown):  # the error itself, not a group
        await all_or_cancel(all_or_cancel(failing_peer()), all_or_cancel(slow_local_read()))
    assert ended == ["local read"]


async def test_a_failure_leaves_the_callers_task_uncancelled() -> None:
    """asyncio.TaskGroup on Python 3.11 leaves it marked cancelled, and loops that check
    for an absorbed cancel would then end."""

    async def failing_peer() -> int:
        await asyncio.sleep(0)
        raise PeerDown("UNAVAILABLE")

    async def caller() -> int:
        with pytest.raises(PeerDown):
            await all_or_cancel(failing_peer(), asyncio.sleep(3600, 0))
        current = asyncio.current_task()
        assert current is not None
        return current.cancelling()

    assert await asyncio.create_task(caller()) == 0


async def test_a_cancel_during_the_cleanup_after_a_failure_is_not_swallowed() -> None:
    cleaning = asyncio.Event()

    async def slow_cleanup() -> int:
        try:
            await asyncio.Event().wait()
        finally:
            cleaning.set()
            await asyncio.sleep(0.05)
        return 0

    async def failing_peer() -> int:
        await asyncio.sleep(0)
        raise PeerDown("UNAVAILABLE")

    caller = asyncio.create_task(all_or_cancel(failing_peer(), slow_cleanup()))
    await asyncio.wait_for(cleaning.wait(), 10)
    caller.cancel()  # the node stops while the repair is failing
    with pytest.raises(asyncio.CancelledError):
        await caller


async def test_steps_run_in_reverse_order_and_errors_propagate() -> None:
    ran: list[str] = []

    async def step(name: str) -> None:
        ran.append(name)
        if name == "b":
            raise PeerDown(name)

    with pytest.raises(PeerDown):
        async with StopSteps(5.0) as steps:
            steps.push_async_callback(step, "a")
            steps.push_async_callback(step, "b")
            steps.push_async_callback(step, "c")
    assert ran == ["c", "b", "a"]


async def test_an_overrunning_step_is_logged_once_and_forced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(concurrency, "FORCED_GRACE_S", 0.5)
    forced: list[str] = []
    after: list[str] = []

    async def hangs() -> None:
        await asyncio.Event().wait()

    async def next_step() -> None:
        after.append("ran")

    with capture_logs() as logged:
        async with StopSteps(0.05) as steps:
            steps.push_async_callback(next_step)
            steps.push_step(hangs, "Hangs.stop", lambda: forced.append("forced"))
    overran = [e for e in logged if e["event"] == "node_stop_step_overran"]
    assert [e["step"] for e in overran] == ["Hangs.stop"]
    assert "<locals>.hangs" in overran[0]["pending_tasks"]
    assert forced == ["forced"] and after == ["ran"]
    assert not [e for e in logged if e["event"] == "node_stop_step_abandoned"]


async def test_a_step_that_ignores_being_forced_is_left_behind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(concurrency, "FORCED_GRACE_S", 0.05)
    release = asyncio.Event()

    async def deaf() -> None:
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                continue

    with capture_logs() as logged:
        async with StopSteps(0.05) as steps:
            steps.push_step(deaf, "Deaf.stop")
    [left] = [t for t in asyncio.all_tasks() if t.get_name() == "stop:Deaf.stop"]
    release.set()
    await left  # it still ends once what it waits for comes
    events = [e["event"] for e in logged]
    assert events.count("node_stop_step_overran") == 1
    assert events.count("node_stop_step_abandoned") == 1


async def test_repeating_steps_until_stopped_and_no_longer() -> None:
    steps = 0
    third = asyncio.Event()

    async def step() -> None:
        nonlocal steps
        steps += 1
        if steps == 3:
            third.set()

    repeating = Repeating(step, 0.001, "repeating-test")
    repeating.start()
    await asyncio.wait_for(third.wait(), 10)
    await repeating.stop()
    stopped_at = steps
    await asyncio.sleep(0.01)  # ten intervals: a step still running would have counted
    assert steps == stopped_at
    assert not [t for t in asyncio.all_tasks() if t.get_name() == "repeating-test"]


async def test_repeating_ends_when_its_step_absorbs_the_cancel() -> None:
    """As a grpc.aio call can: the step returns as if its task had not been cancelled (the
    first time only, so that a failing test ends)."""
    inside = asyncio.Event()
    absorbed = 0

    async def step() -> None:
        nonlocal absorbed
        inside.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            absorbed += 1
            if absorbed > 1:
                raise

    repeating = Repeating(step, 0, "absorbing-test")
    repeating.start()
    await asyncio.wait_for(inside.wait(), 10)
    # Without end_if_cancelled the loop would go on into the next hour-long step.
    await asyncio.wait_for(repeating.stop(), 10)
    assert absorbed == 1
    assert not [t for t in asyncio.all_tasks() if t.get_name() == "absorbing-test"]
