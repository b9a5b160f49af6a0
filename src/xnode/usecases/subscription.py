"""A subscription: catch up from the store past the cursor, then follow live delivery.

The listener is registered before the first catch-up read, so every envelope committed
afterwards reaches it; anything at or below the cursor (already sent by catch-up) is dropped.
Fanout delivers each originator's envelopes in order, so nothing is skipped at the switch.

Live, each delivery is everything that waited for the stream since its last one: a stream
slower than the commits gets fewer, larger frames. One that falls further behind than its
listener allows once live is ended (`FellBehind`) with its cursor, to resume from; one whose
catch-up from the store took that long reads the store again before it goes live.

Catch-up reads pages of at most `page_size` envelopes and `budget` bytes (core.sizes): a
page of large envelopes is cut at the budget and the next read goes on from it, so a stream
never holds more than one budget's envelopes read from the store."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from enum import Enum

from xnode.core.cursors import Cursor
from xnode.core.envelopes import StoredEnvelope
from xnode.core.query import EnvelopeQuery
from xnode.core.sizes import DEFAULT_ANSWER_BUDGET_BYTES
from xnode.usecases.fanout import MAX_LAG_S, Batch, Fanout, Listener

# The store's query_within (usecases.ports.AnswerReader): a page, and whether the byte
# budget cut it.
Fetch = Callable[[EnvelopeQuery, int, int], Awaitable[tuple[list[StoredEnvelope], bool]]]


class Phase(Enum):
    CATCHUP = "catchup"
    CAUGHT_UP = "caught_up"
    LIVE = "live"
    KEEPALIVE = "keepalive"


@dataclass(frozen=True, slots=True)
class Delivery:
    phase: Phase
    batches: list[Batch]

    @property
    def envelopes(self) -> list[StoredEnvelope]:
        return [e for b in self.batches for e in b.envelopes]

    @property
    def count(self) -> int:
        return sum(len(b) for b in self.batches)


class FellBehind(Exception):
    """A live subscription's stream did not take its deliveries for longer than its limit."""

    def __init__(self, lag_s: float, cursors: list[Cursor]) -> None:
        super().__init__(f"fell {lag_s:.1f} s behind live delivery")
        self.lag_s = lag_s
        self.cursors = cursors  # one per group: where the stream got to


class _Group:
    """Queries that share one cursor (all topics of SubscribeEnvelopes, or one topic filter)."""

    def __init__(self, query: EnvelopeQuery) -> None:
        self.query = query
        self.tops = query.cursor.to_dict()

    @property
    def cursor(self) -> Cursor:
        return Cursor(self.tops)

    def advance(self, envelopes: list[StoredEnvelope]) -> None:
        tops = self.tops
        for env in envelopes:
            if env.sequence_id > tops.get(env.originator_node_id, 0):
                tops[env.originator_node_id] = env.sequence_id


class _Keepalive:
    """Wakes an idle listener for a keepalive: one timer per stream, ticking every half
    period, rather than one per wait (a cost on every delivery). A stream that sent nothing
    since the tick before gets one, so none is silent for more than the period."""

    def __init__(self, listener: Listener, period_s: float) -> None:
        self._listener = listener
        self._half = period_s / 2
        self._loop = asyncio.get_running_loop()
        self._handle = self._loop.call_later(self._half, self._tick)
        self._active = True  # sent something since the last tick
        self.due = False

    def _tick(self) -> None:
        if not self._active:
            self.due = True
            self._listener.wake()
        self._active = False
        self._handle = self._loop.call_later(self._half, self._tick)

    def sent(self) -> None:
        self._active, self.due = True, False

    def cancel(self) -> None:
        self._handle.cancel()


class Subscription:
    def __init__(
        self,
        groups: list[EnvelopeQuery],
        fetch: Fetch,
        fanout: Fanout,
        page_size: int = 500,
        budget: int = DEFAULT_ANSWER_BUDGET_BYTES,
        keepalive_s: float = 30.0,
        max_lag_s: float = MAX_LAG_S,
        on_fell_behind: Callable[[FellBehind], None] | None = None,
    ) -> None:
        """`on_fell_behind` is told when the live stream falls behind, at once: its stream
        may be stuck in a write and learn of it only when the write completes."""
        self._groups = [_Group(q) for q in groups]
        self._fetch = fetch
        self._fanout = fanout
        self._page_size = page_size
        self._budget = budget
        self._keepalive_s = keepalive_s
        self._by_topic = {t: g for g in self._groups for t in g.query.topics}
        self._by_originator = {o: g for g in self._groups for o in g.query.originators}
        self._listener = Listener(
            topics=frozenset(self._by_topic),
            originators=frozenset(self._by_originator),
            max_lag_s=max_lag_s,
            on_fell_behind=self._fell_behind,
        )
        self._on_fell_behind = on_fell_behind
        self._live = False
        self._closed = False

    def _fell_behind(self, lag_s: float) -> None:
        if self._live and self._on_fell_behind is not None:
            self._on_fell_behind(FellBehind(lag_s, self.cursors))

    def close(self) -> None:
        """Ends `deliveries()` at its next step (used when the node shuts down)."""
        self._closed = True
        self._listener.wake()

    @property
    def cursors(self) -> list[Cursor]:
        return [g.cursor for g in self._groups]

    async def deliveries(self) -> AsyncGenerator[Delivery, None]:
        """Raises FellBehind when the stream stops keeping up with live delivery."""
        self._fanout.register(self._listener)
        try:
            while not self._closed:
                async for delivery in self._catch_up():
                    yield delivery
                if self._closed:
                    return
                if self._listener.fell_behind:
                    continue  # live envelopes waited through a long catch-up: read them too
                self._live = True
                yield Delivery(Phase.CAUGHT_UP, [])
                async for delivery in self._follow_live():
                    yield delivery
        finally:
            self._fanout.unregister(self._listener)

    async def _catch_up(self) -> AsyncIterator[Delivery]:
        self._listener.caught_up()
        self._live = False
        for group in self._groups:
            while not self._closed:
                page, cut = await self._fetch(
                    group.query.with_cursor(group.cursor), self._page_size, self._budget
                )
                if page:
                    group.advance(page)
                    yield Delivery(Phase.CATCHUP, [Batch(page)])
                if len(page) < self._page_size and not cut:
                    break

    async def _follow_live(self) -> AsyncIterator[Delivery]:
        listener = self._listener
        keepalive = _Keepalive(listener, self._keepalive_s)
        try:
            while True:
                await listener.ready()
                if self._closed:
                    return
                if listener.fell_behind:
                    raise FellBehind(listener.lag_s, self.cursors)
                fresh = [b for b in map(self._unseen, listener.take()) if b is not None]
                if fresh or keepalive.due:
                    keepalive.sent()
                    yield Delivery(Phase.LIVE, fresh) if fresh else Delivery(Phase.KEEPALIVE, [])
        finally:
            keepalive.cancel()

    def _unseen(self, batch: Batch) -> Batch | None:
        """The batch, or what of it catch-up has not sent already (only around the switch)."""
        fresh = []
        for env in batch.envelopes:
            group = self._by_topic.get(env.topic) or self._by_originator.get(env.originator_node_id)
            if group is None or env.sequence_id <= group.tops.get(env.originator_node_id, 0):
                continue
            group.tops[env.originator_node_id] = env.sequence_id
            fresh.append(env)
        if len(fresh) == len(batch):
            return batch  # keeps the frame shared with the other streams
        return Batch(fresh) if fresh else None
