"""A subscription: catch up from the store past the cursor, then follow live delivery.

The listener is registered before the first catch-up read, so every envelope committed
afterwards reaches it; anything at or below the cursor (already sent by catch-up) is dropped.
Fanout delivers each originator's envelopes in order, so nothing is skipped at the switch.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from enum import Enum

from xnode.core.cursors import Cursor
from xnode.core.envelopes import StoredEnvelope
from xnode.core.query import EnvelopeQuery
from xnode.usecases.fanout import Fanout, Listener

Fetch = Callable[[EnvelopeQuery, int], Awaitable[list[StoredEnvelope]]]


class Phase(Enum):
    CATCHUP = "catchup"
    CAUGHT_UP = "caught_up"
    LIVE = "live"
    KEEPALIVE = "keepalive"


@dataclass(frozen=True, slots=True)
class Delivery:
    phase: Phase
    envelopes: list[StoredEnvelope]


class _Group:
    """Queries that share one cursor (all topics of SubscribeEnvelopes, or one topic filter)."""

    def __init__(self, query: EnvelopeQuery) -> None:
        self.query = query
        self.cursor = query.cursor

    def advance(self, envelopes: list[StoredEnvelope]) -> None:
        top = self.cursor.to_dict()
        for env in envelopes:
            if env.sequence_id > top.get(env.originator_node_id, 0):
                top[env.originator_node_id] = env.sequence_id
        self.cursor = Cursor(top)


class Subscription:
    def __init__(
        self,
        groups: list[EnvelopeQuery],
        fetch: Fetch,
        fanout: Fanout,
        page_size: int = 500,
        keepalive_s: float = 30.0,
    ) -> None:
        self._groups = [_Group(q) for q in groups]
        self._fetch = fetch
        self._fanout = fanout
        self._page_size = page_size
        self._keepalive_s = keepalive_s
        self._by_topic = {t: g for g in self._groups for t in g.query.topics}
        self._by_originator = {o: g for g in self._groups for o in g.query.originators}
        self._listener = Listener(
            topics=frozenset(self._by_topic), originators=frozenset(self._by_originator)
        )
        self._closed = False

    def close(self) -> None:
        """Ends `deliveries()` at its next step (used when the node shuts down)."""
        self._closed = True
        self._listener.offer([])

    async def deliveries(self) -> AsyncGenerator[Delivery, None]:
        self._fanout.register(self._listener)
        try:
            while not self._closed:
                async for delivery in self._catch_up():
                    yield delivery
                if self._closed:
                    return
                yield Delivery(Phase.CAUGHT_UP, [])
                async for delivery in self._follow_live():
                    yield delivery
        finally:
            self._fanout.unregister(self._listener)

    async def _catch_up(self) -> AsyncIterator[Delivery]:
        self._listener.lagged = False
        for group in self._groups:
            while not self._closed:
                page = await self._fetch(group.query.with_cursor(group.cursor), self._page_size)
                if page:
                    group.advance(page)
                    yield Delivery(Phase.CATCHUP, page)
                if len(page) < self._page_size:
                    break

    async def _follow_live(self) -> AsyncIterator[Delivery]:
        """Returns when the listener lagged, so the caller catches up from the store."""
        queue = self._listener.queue
        while True:
            try:
                # Not wait_for: on Python 3.11 it swallows a cancel that comes with a batch,
                # and a closed subscription would then outlive its call.
                async with asyncio.timeout(self._keepalive_s):
                    batch = await queue.get()
            except TimeoutError:
                yield Delivery(Phase.KEEPALIVE, [])
                continue
            if self._listener.lagged or self._closed:
                return
            fresh = self._unseen(batch)
            if fresh:
                yield Delivery(Phase.LIVE, fresh)

    def _unseen(self, batch: list[StoredEnvelope]) -> list[StoredEnvelope]:
        fresh = []
        for env in batch:
            group = self._by_topic.get(env.topic) or self._by_originator.get(env.originator_node_id)
            if group is None or env.sequence_id <= group.cursor[env.originator_node_id]:
                continue
            group.cursor = group.cursor.advanced(env.originator_node_id, env.sequence_id)
            fresh.append(env)
        return fresh
