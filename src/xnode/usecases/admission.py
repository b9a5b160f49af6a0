"""Which publishes the node has accepted, so a drain can finish them.

A publish enters before any work (validation, the chain, the group commit). Once the node
drains, nothing more enters: the caller gets UNAVAILABLE and publishes elsewhere, knowing
nothing of its request was stored; every publish that entered before runs to its answer.

The server stops only once the refusals have gone quiet: a request that reached the server
but no handler yet when it stops would end CANCELLED, which a client cannot tell from a
publish lost half way."""

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
        self._last_refused = -math.inf

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @contextlib.contextmanager
    def admit(self) -> Iterator[None]:
        """Counts one accepted request while it runs; raises Rejected(UNAVAILABLE) after
        `close()`."""
        if self._closed:
            self._last_refused = asyncio.get_running_loop().time()
            raise Rejected(Reason.UNAVAILABLE, "node is shutting down; publish to another node")
        self._in_flight += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._in_flight -= 1
            if not self._in_flight:
                self._idle.set()

    def close(self) -> None:
        """Refuses every request from now on."""
        self._closed = True

    async def drained(self, timeout_s: float, quiet_s: float = 0.2) -> bool:
        """Waits until every accepted request has answered and none was refused for
        `quiet_s` (callers have gone elsewhere); False if `timeout_s` passed first (requests
        still running, or callers still knocking)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            try:
                await asyncio.wait_for(self._idle.wait(), deadline - loop.time())
            except TimeoutError:
                return False
            quiet_at = self._last_refused + quiet_s
            if loop.time() >= quiet_at:
                return True
            if quiet_at > deadline:
                await asyncio.sleep(max(deadline - loop.time(), 0.0))
                return False
            await asyncio.sleep(quiet_at - loop.time())
