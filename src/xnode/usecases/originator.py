"""Group commit for originating: concurrent publishes share one transaction.

Requests queue up while the previous batch commits; the next batch takes everything waiting
(up to `max_batch` envelopes). A caller is answered only after its batch has committed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from xnode.core.envelopes import IndexedEnvelope, Originable
from xnode.core.errors import Reason, Rejected

Append = Callable[[Sequence[Originable]], Awaitable[list[IndexedEnvelope]]]
Committed = Callable[[list[IndexedEnvelope]], Awaitable[None]]


@dataclass(slots=True)
class _Request:
    envelopes: Sequence[Originable]
    result: asyncio.Future[list[IndexedEnvelope]]


@dataclass
class BatchStats:
    """Observers for metrics; called once per committed batch."""

    on_batch: list[Callable[[int, float], None]] = field(default_factory=list)


class Originator:
    def __init__(
        self,
        append: Append,
        committed: Committed,
        max_batch: int = 1000,
        stats: BatchStats | None = None,
    ) -> None:
        self._append = append
        self._committed = committed
        self._max_batch = max_batch
        self._stats = stats or BatchStats()
        self._pending: list[_Request] = []
        self._wake = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="originator")

    @property
    def closing(self) -> bool:
        """Publishes are refused from now on (the node drains)."""
        return self._closing

    async def publish(self, envelopes: Sequence[Originable]) -> list[IndexedEnvelope]:
        if self._closing:
            raise Rejected(Reason.UNAVAILABLE, "node is shutting down; publish to another node")
        request = _Request(envelopes, asyncio.get_running_loop().create_future())
        self._pending.append(request)
        self._wake.set()
        return await request.result

    async def close(self) -> None:
        """Stops taking publishes and waits until every accepted one has committed."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task

    def _take_batch(self) -> list[_Request]:
        taken: list[_Request] = []
        size = 0
        while self._pending and (
            not taken or size + len(self._pending[0].envelopes) <= self._max_batch
        ):
            request = self._pending.pop(0)
            taken.append(request)
            size += len(request.envelopes)
        return taken

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._pending:
                if self._closing:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            batch = self._take_batch()
            started = loop.time()
            await self._commit(batch)
            for observe in self._stats.on_batch:
                observe(sum(len(r.envelopes) for r in batch), loop.time() - started)

    async def _commit(self, batch: list[_Request]) -> None:
        flat = [e for r in batch for e in r.envelopes]
        try:
            originated = await self._append(flat)
        except Exception as exc:
            for request in batch:
                if not request.result.done():
                    request.result.set_exception(exc)
            return
        offset = 0
        for request in batch:
            part = originated[offset : offset + len(request.envelopes)]
            offset += len(request.envelopes)
            if not request.result.done():
                request.result.set_result(part)
        await self._committed(originated)
