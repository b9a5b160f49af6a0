"""Subscribing (XIP-49 3.3.3): one implementation behind SubscribeEnvelopes,
SubscribeOriginators and SubscribeTopics, which differ only in how the API frames deliveries.

Catch-up from each cursor, then live delivery (xnode.usecases.subscription); open
subscriptions end when the node drains, or when their stream falls behind live delivery, and
the client resubscribes from its cursor."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack

import structlog

from xnode.core.cursors import Cursor
from xnode.core.errors import Reason, Rejected
from xnode.core.query import MAX_QUERY_TOPICS, EnvelopeQuery
from xnode.core.sizes import DEFAULT_ANSWER_BUDGET_BYTES
from xnode.observability.metrics import (
    OPEN_SUBSCRIPTIONS,
    SUBSCRIPTION_DELIVERIES,
    SUBSCRIPTIONS_ENDED,
)
from xnode.usecases.fanout import MAX_LAG_S, Fanout
from xnode.usecases.limits import ANONYMOUS, ApiLimits, Caller
from xnode.usecases.ports import AnswerReader
from xnode.usecases.subscription import Delivery, FellBehind, Subscription

log = structlog.get_logger(__name__)

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


def _report_fell_behind(method: str) -> Callable[[FellBehind], None]:
    def report(exc: FellBehind) -> None:
        SUBSCRIPTIONS_ENDED.labels(method, "fell_behind").inc()
        log.warning(
            "subscription_fell_behind",
            method=method,
            lag_s=round(exc.lag_s, 3),
            cursors=[dict(c) for c in exc.cursors],
        )

    return report


def _ended(exc: FellBehind) -> Rejected:
    """What the client of a stream that fell behind is told, with the cursor it got to when
    it has one."""
    return Rejected(
        Reason.UNAVAILABLE,
        f"this stream {exc}: the node ended it; resubscribe from your last cursor",
        cursor=exc.cursors[0] if len(exc.cursors) == 1 else None,
    )


class Subscribe:
    def __init__(
        self,
        store: AnswerReader,
        fanout: Fanout,
        keepalive_s: float = 30.0,
        limits: ApiLimits | None = None,
        max_lag_s: float = MAX_LAG_S,
        budget: int = DEFAULT_ANSWER_BUDGET_BYTES,
    ) -> None:
        """`budget`: the bytes of one catch-up read (core.sizes), as a query answer's."""
        self._store = store
        self._budget = budget
        self._limits = limits
        self._fanout = fanout
        self._keepalive_s = keepalive_s
        self._max_lag_s = max_lag_s
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
        """Deliveries until the node drains, then Rejected(UNAVAILABLE); the same when the
        stream falls behind, with its cursor. `method` names the RPC for the metrics. Raises
        LimitExceeded before the first delivery when the caller is over its limits."""
        if self._closed:
            raise Rejected(Reason.UNAVAILABLE, DRAINING)
        async with AsyncExitStack() as held:  # not a generator inside: one level per delivery
            if self._limits is not None:
                await self._limits.subscribe(caller)
                await held.enter_async_context(self._limits.subscription(caller))
            subscription = Subscription(
                groups,
                self._store.query_within,
                self._fanout,
                budget=self._budget,
                keepalive_s=self._keepalive_s,
                max_lag_s=self._max_lag_s,
                on_fell_behind=_report_fell_behind(method),
            )
            self._open.add(subscription)
            gauge = OPEN_SUBSCRIPTIONS.labels(method)
            delivered = SUBSCRIPTION_DELIVERIES.labels(method)
            gauge.inc()
            try:
                async for delivery in subscription.deliveries():
                    if delivery.batches:
                        delivered.inc(delivery.count)
                    yield delivery
            except FellBehind as exc:
                raise _ended(exc) from None
            finally:
                gauge.dec()
                self._open.discard(subscription)
        SUBSCRIPTIONS_ENDED.labels(method, "draining").inc()
        raise Rejected(Reason.UNAVAILABLE, DRAINING)
