"""Which publishes the node has accepted, so a drain can finish them.

A publish enters before any work (validation, the chain, the group commit). Once the node
drains, nothing more enters: the caller gets UNAVAILABLE and publishes elsewhere, knowing
nothing of its request was stored; every publish that entered before runs to its answer.

The server stops only once requests have gone quiet: gRPC's shutdown cancels every request
that reached the server but no handler yet, and the client sees CANCELLED, which it cannot
tell from a publish lost half way. Quiet is counted from the last answer as well as from the
last refusal: a caller answered just before the close sends its next publish a moment later,
and a drain that found nothing in flight and nothing refused yet stopped at once and
cancelled it. A node that answered nothing for that long stops at once."""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Iterator

from xnode.core.errors import Reason, Rejected


class Admission:
    def __init__(self) -> None:
        self._in_flight = 0
        self._closed = False
        self._idle = asyncio.Event()
        self._idle.set()
        self._last_event = -math.inf  # loop time of the last answer or refusal

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @contextlib.contextmanager
    def admit(self) -> Iterator[None]:
        """Counts one accepted request while it runs; raises Rejected(UNAVAILABLE) after
        `close()`."""
        self.enter()
        try:
            yield
        finally:
            self.leave()

    def enter(self) -> None:
        """`admit` without a context manager (the publish path: one fewer generator per
        request); every `enter` that returned needs its `leave`."""
        if self._closed:
            self._touch()
            raise Rejected(Reason.UNAVAILABLE, "node is shutting down; publish to another node")
        self._in_flight += 1
        if self._in_flight == 1:
            self._idle.clear()

    def leave(self) -> None:
        self._in_flight -= 1
        if not self._in_flight:
            self._idle.set()
        self._touch()

    def close(self) -> None:
        """Refuses every request from now on."""
        self._closed = True

    def _touch(self) -> None:
        self._last_event = asyncio.get_running_loop().time()

    async def drained(self, timeout_s: float, quiet_s: float = 0.5) -> bool:
        """Waits until every accepted request has answered and nothing was answered or
        refused for `quiet_s` (callers have gone elsewhere); False if `timeout_s` passed
        first (requests still running, or callers still knocking)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            try:
                if not self._idle.is_set():
                    await asyncio.wait_for(self._idle.wait(), deadline - loop.time())
            except TimeoutError:
                return False
            quiet_at = self._last_event + quiet_s
            if loop.time() >= quiet_at:
                return True
            if quiet_at > deadline:
                await asyncio.sleep(max(deadline - loop.time(), 0.0))
                return False
            await asyncio.sleep(quiet_at - loop.time())
