"""A peer stream ends on its (one) cancel even when the cancel comes just as a frame arrives:
with `asyncio.wait_for` (Python 3.11) that cancel was swallowed, the stream of a healthy peer
went on for good and the node's stop waited for it (the CI teardown hang of the reland
branch's notes). Also the checkpoint issuer, woken as it is stopped."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from xnode.core.backoff import Backoff
from xnode.core.crypto import SigningKey
from xnode.core.node_tokens import TokenProvider
from xnode.observability.outage import DatabaseOutage
from xnode.replication.ingest import IngestContext, OriginatorLog
from xnode.replication.stream import Mode, PeerStream, Timeouts
from xnode.usecases.logs import CheckpointIssuer, LogPort

PEER = 200
CANCELLED_AT = 3
ENOUGH = 1000  # frames the peer sends at most (the stream ends by itself after them)


class HealthyCall:
    """A peer that answers at once, forever (keepalives); the stop cancels the reading task
    exactly as frame CANCELLED_AT arrives."""

    def __init__(self) -> None:
        self.reader: asyncio.Task[None] | None = None
        self.frames = 0

    def __aiter__(self) -> HealthyCall:
        return self

    async def __anext__(self) -> bytes:
        await asyncio.sleep(0)
        self.frames += 1
        if self.frames == CANCELLED_AT:
            assert self.reader is not None
            self.reader.cancel()
        if self.frames > ENOUGH:
            raise StopAsyncIteration
        return b""  # a keepalive: no envelopes

    async def initial_metadata(self) -> tuple[()]:
        return ()

    def cancel(self) -> bool:
        return True


class Channel:
    def __init__(self, call: HealthyCall) -> None:
        self._call = call

    def unary_stream(self, *_args: Any, **_kwargs: Any) -> Any:
        return lambda *_a, **_k: self._call


async def test_a_cancel_coming_with_a_frame_ends_the_stream() -> None:
    call = HealthyCall()
    target = OriginatorLog(PEER, None, cast(IngestContext, None))  # nothing is stored
    stream = PeerStream(
        PEER,
        lambda: cast(Any, Channel(call)),
        target,
        Mode.DIRECT,
        TokenProvider(SigningKey.generate(), 100, lambda: 1_700_000_000),
        Timeouts(response_s=5, slow_s=5, idle_s=5),
        Backoff(0.1, 1.0),
        None,
        DatabaseOutage(str),
    )
    task = asyncio.create_task(stream.run())
    call.reader = task
    await asyncio.wait([task], timeout=30)
    assert task.cancelled()
    assert call.frames == CANCELLED_AT  # it read nothing after the cancel


class NothingToIssue:
    async def issue(self, *_args: Any) -> None:
        return None


async def test_the_checkpoint_issuer_stops_when_woken_as_it_is_cancelled() -> None:
    # The wake-up lands some loop steps before the cancel: one of them is the step between
    # the wait ending and the issuer resuming, where wait_for dropped the cancel.
    for steps in range(4):
        issuer = CheckpointIssuer(
            cast(LogPort, NothingToIssue()),
            100,
            SigningKey.generate(),
            1,
            3600.0,
            DatabaseOutage(str),
        )
        issuer.start()
        await asyncio.sleep(0)  # it waits for a wake-up
        issuer.committed(1)  # wakes it...
        for _ in range(steps):
            await asyncio.sleep(0)
        stopping = asyncio.create_task(issuer.stop())  # ...as it is stopped
        stopped, _ = await asyncio.wait([stopping], timeout=30)
        task = issuer._task
        assert task is not None
        if not stopped:  # the loop went on: end it for the next tests, then fail
            task.cancel()
            await stopping
        assert stopped and task.cancelled(), f"still running, woken {steps} steps before"
