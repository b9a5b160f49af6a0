"""Reads served by a streaming replica of the node's database when it holds what they need.

A replica is a consistent copy of the primary a little while ago. A query whose cursor is
ahead of what the replica holds (a client that just published and names its own envelope)
goes to the primary, so a client reads its own writes. A subscription's catch-up goes to the
replica only when the replica holds everything the node has committed: the subscription's
live delivery starts at what the node had committed when it registered, so a catch-up that
stopped short of it would skip envelopes. Live delivery is unchanged (the node's fanout).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from xnode.core.cursors import Cursor
from xnode.core.envelopes import StoredEnvelope
from xnode.core.query import EnvelopeQuery
from xnode.observability.metrics import READS_ROUTED
from xnode.usecases.ports import AnswerReader


class ReplicaClock(Protocol):
    def held(self) -> Cursor | None:
        """What the replica holds per originator as last read; None when it does not answer."""
        ...


def covers(held: Cursor, needed: Cursor) -> bool:
    return all(held[originator] >= seq for originator, seq in needed.to_dict().items())


class RoutedReads:
    """An AnswerReader: queries from the replica when it holds `needs(query)`, else from
    the primary; everything else from the primary."""

    def __init__(
        self,
        primary: AnswerReader,
        replica: AnswerReader,
        clock: ReplicaClock,
        needs: Callable[[EnvelopeQuery], Cursor],
    ) -> None:
        self._primary = primary
        self._replica = replica
        self._clock = clock
        self._needs = needs

    async def query(self, query: EnvelopeQuery, limit: int) -> list[StoredEnvelope]:
        held = self._clock.held()
        if held is not None and covers(held, self._needs(query)):
            READS_ROUTED.labels("replica").inc()
            return await self._replica.query(query, limit)
        READS_ROUTED.labels("primary").inc()
        return await self._primary.query(query, limit)

    async def query_within(
        self, query: EnvelopeQuery, limit: int, budget: int
    ) -> tuple[list[StoredEnvelope], bool]:
        held = self._clock.held()
        if held is not None and covers(held, self._needs(query)):
            READS_ROUTED.labels("replica").inc()
            return await self._replica.query_within(query, limit, budget)
        READS_ROUTED.labels("primary").inc()
        return await self._primary.query_within(query, limit, budget)

    async def newest(self, topics: Sequence[bytes], budget: int) -> list[bytes | None]:
        return await self._primary.newest(topics, budget)

    async def vector_clock(self) -> Cursor:
        return await self._primary.vector_clock()


def for_queries(query: EnvelopeQuery) -> Cursor:
    """A query needs what its cursor names."""
    return query.cursor


def for_catch_up(committed: Callable[[], Cursor]) -> Callable[[EnvelopeQuery], Cursor]:
    """A catch-up page needs everything the node has committed (`committed`)."""
    return lambda _query: committed()
