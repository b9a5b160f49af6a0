"""Subscribing (XIP-49 3.3.3): one implementation behind SubscribeEnvelopes,
SubscribeOriginators and SubscribeTopics, which differ only in how the API frames deliveries.

Catch-up from each cursor, then live delivery (xnode.usecases.subscription); open
subscriptions end when the node drains, and the client resubscribes from its cursor."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from xnode.core.cursors import Cursor
from xnode.core.errors import Reason, Rejected
from xnode.core.query import MAX_QUERY_TOPICS, EnvelopeQuery
from xnode.observability.metrics import OPEN_SUBSCRIPTIONS
from xnode.usecases.fanout import Fanout
from xnode.usecases.limits import ANONYMOUS, ApiLimits, Caller
from xnode.usecases.ports import EnvelopeReader
from xnode.usecases.subscription import Delivery, Subscription

DRAINING = "node is shutting down; resubscribe from your cursor"


def topic_groups(filters: Sequence[tuple[bytes, Cursor]]) -> list[EnvelopeQuery]:
    """SubscribeTopics' (topic, cursor) filters; topics that share a cursor are caught up by
    one query."""
    if not filters:
        raise Rejected(Reason.MALFORMED, "filters is empty")
    if len(filters) > MAX_QUERY_TOPICS:
        raise Rejected(
            Reason.LIMIT_EXCEEDED,
            f"{len(filters)} topic filters, the limit is {MAX_QUERY_TOPICS}",
        )
    by_cursor: dict[Cursor, list[bytes]] = {}
    for topic, cursor in filters:
        by_cursor.setdefault(cursor, []).append(topic)
    return [EnvelopeQuery.validated(t, [], c) for c, t in by_cursor.items()]


class Subscribe:
    def __init__(
        self,
        store: EnvelopeReader,
        fanout: Fanout,
        keepalive_s: float = 30.0,
        limits: ApiLimits | None = None,
    ) -> None:
        self._store = store
        self._limits = limits
        self._fanout = fanout
        self._keepalive_s = keepalive_s
        self._open: set[Subscription] = set()
        self._closed = False

    def close_all(self) -> None:
        """Ends every open subscription at its next step and refuses new ones (the node is
        draining: a subscription opened now would hold the server's stop for the whole grace,
        then end CANCELLED)."""
        self._closed = True
        for subscription in list(self._open):
            subscription.close()

    async def __call__(
        self, groups: list[EnvelopeQuery], method: str, caller: Caller = ANONYMOUS
    ) -> AsyncIterator[Delivery]:
        """Deliveries until the node drains, then Rejected(UNAVAILABLE). `method` names the
        RPC for the open-subscriptions gauge. Raises LimitExceeded before the first delivery
        when the caller is over its limits."""
        if self._closed:
            raise Rejected(Reason.UNAVAILABLE, DRAINING)
        if self._limits is None:
            async for delivery in self._deliver(groups, method):
                yield delivery
            return
        await self._limits.subscribe(caller)
        async with self._limits.subscription(caller):
            async for delivery in self._deliver(groups, method):
                yield delivery

    async def _deliver(self, groups: list[EnvelopeQuery], method: str) -> AsyncIterator[Delivery]:
        subscription = Subscription(
            groups, self._store.query, self._fanout, keepalive_s=self._keepalive_s
        )
        self._open.add(subscription)
        gauge = OPEN_SUBSCRIPTIONS.labels(method)
        gauge.inc()
        try:
            async for delivery in subscription.deliveries():
                yield delivery
        finally:
            gauge.dec()
            self._open.discard(subscription)
        raise Rejected(Reason.UNAVAILABLE, DRAINING)
