"""The envelope API: ReplicationApi, QueryApi and PublishApi share these handlers.

Responses that carry stored envelopes are framed from the stored bytes (see xnode.core.wire),
so handlers return serialized messages."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Iterable, Sequence
from typing import Any

import grpc

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xnode.api.errors import stream_errors, unary_errors
from xnode.core import wire
from xnode.core.envelopes import (
    StoredEnvelope,
    ValidPayerEnvelope,
    check_depends_on,
    cursor_from_proto,
    validate_payer_envelope,
)
from xnode.core.errors import Reason, Rejected
from xnode.core.query import MAX_QUERY_TOPICS, EnvelopeQuery, effective_limit
from xnode.core.topics import Topic, TopicError
from xnode.core.vector_clock import NodeClock
from xnode.observability.metrics import ENVELOPES_STORED, OPEN_SUBSCRIPTIONS, PUBLISH_LATENCY
from xnode.store.envelopes import EnvelopeStore
from xnode.usecases.fanout import Fanout
from xnode.usecases.originator import Originator
from xnode.usecases.ports import ChainPublisher, InboxResolver
from xnode.usecases.subscription import Delivery, Phase, Subscription

Context = grpc.aio.ServicerContext[Any, Any]
MAX_PUBLISH_ENVELOPES = 1000
# Batches this large are validated in a worker thread: signature recovery releases the GIL.
THREAD_VALIDATION_MIN = 32
MAX_STREAM_MESSAGE_BYTES = 4 * 1024 * 1024

_TOPICS_STATUS = api.SubscribeTopicsResponse.SubscriptionStatus


def _validate_all(
    envelopes: Sequence[envelopes_pb2.PayerEnvelope], node_id: int
) -> list[ValidPayerEnvelope]:
    valid = []
    for i, payer in enumerate(envelopes):
        try:
            valid.append(validate_payer_envelope(payer, node_id))
        except Rejected as exc:
            raise exc.at(i) from None
    return valid


async def _in_request(publish: Awaitable[list[bytes]], positions: list[int]) -> list[bytes]:
    """The chain publisher names envelopes by their place among the chain-bound ones; the
    client needs their place in its request."""
    try:
        return await publish
    except Rejected as exc:
        if exc.index is None:
            raise
        raise exc.at(positions[exc.index]) from None


def _chunks(envelopes: list[StoredEnvelope]) -> Iterable[list[bytes]]:
    """Splits a delivery so no stream message grows past a few MiB."""
    chunk: list[bytes] = []
    size = 0
    for env in envelopes:
        if chunk and size + len(env.raw) > MAX_STREAM_MESSAGE_BYTES:
            yield chunk
            chunk, size = [], 0
        chunk.append(env.raw)
        size += len(env.raw)
    if chunk:
        yield chunk


def _topics_status(status: int) -> bytes:
    return api.SubscribeTopicsResponse(
        status_update=api.SubscribeTopicsResponse.StatusUpdate(status=status)  # type: ignore[arg-type]
    ).SerializeToString()


class EnvelopeService:
    def __init__(
        self,
        node_id: int,
        store: EnvelopeStore,
        originator: Originator,
        fanout: Fanout,
        clock: NodeClock,
        keepalive_s: float = 30.0,
        chain_publisher: ChainPublisher | None = None,
        inbox_resolver: InboxResolver | None = None,
    ) -> None:
        self.node_id = node_id
        self._store = store
        self._originator = originator
        self._fanout = fanout
        self._clock = clock
        self._keepalive_s = keepalive_s
        self._subscriptions: set[Subscription] = set()
        self.chain_publisher = chain_publisher
        self.inbox_resolver = inbox_resolver

    def close_subscriptions(self) -> None:
        for subscription in list(self._subscriptions):
            subscription.close()

    # --- publish -------------------------------------------------------------------------

    @unary_errors
    async def PublishPayerEnvelopes(
        self, request: api.PublishPayerEnvelopesRequest, context: Context
    ) -> bytes:
        started = time.perf_counter()
        envelopes = request.payer_envelopes
        if not envelopes:
            raise Rejected(Reason.MALFORMED, "payer_envelopes is empty")
        if len(envelopes) > MAX_PUBLISH_ENVELOPES:
            raise Rejected(
                Reason.LIMIT_EXCEEDED,
                f"{len(envelopes)} payer envelopes in one request, the limit is "
                f"{MAX_PUBLISH_ENVELOPES}",
            )
        if len(envelopes) >= THREAD_VALIDATION_MIN:
            valid = await asyncio.to_thread(_validate_all, envelopes, self.node_id)
        else:
            valid = _validate_all(envelopes, self.node_id)
        await self._check_depends_on(valid)
        answers = await self._route(valid)
        PUBLISH_LATENCY.observe(time.perf_counter() - started)
        return wire.repeated(1, answers)

    async def _route(self, valid: list[ValidPayerEnvelope]) -> list[bytes]:
        """Chain-bound payloads go to the chain, the rest are originated; answers keep the
        request's order. The chain part goes first: when it is refused (a stale depends_on,
        the chain unreachable), nothing of the request has been stored."""
        chain = self.chain_publisher
        to_chain = [i for i, e in enumerate(valid) if chain is not None and chain.handles(e)]
        if not to_chain:
            originated = await self._originator.publish(valid)
            ENVELOPES_STORED.labels(str(self.node_id)).inc(len(originated))
            return [e.raw for e in originated]
        assert chain is not None
        chain_set = set(to_chain)
        local = [e for i, e in enumerate(valid) if i not in chain_set]
        chain_raw = await _in_request(chain.publish([valid[i] for i in to_chain]), to_chain)
        local_raw = await self._originator.publish(local) if local else []
        ENVELOPES_STORED.labels(str(self.node_id)).inc(len(local_raw))
        chain_iter, local_iter = iter(chain_raw), iter(e.raw for e in local_raw)
        return [next(chain_iter) if i in chain_set else next(local_iter) for i in range(len(valid))]

    async def _check_depends_on(self, valid: list[ValidPayerEnvelope]) -> None:
        for i, envelope in enumerate(valid):
            if self._clock.value.covers(envelope.depends_on):
                continue
            # The in-memory clock may trail commits of other processes: ask the store once.
            self._clock.merge(await self._store.vector_clock())
            try:
                check_depends_on(envelope, self._clock.value)
            except Rejected as exc:
                raise exc.at(i) from None

    # --- query ---------------------------------------------------------------------------

    @staticmethod
    def _query_of(query: api.EnvelopesQuery) -> EnvelopeQuery:
        return EnvelopeQuery.validated(
            list(query.topics), list(query.originator_node_ids), cursor_from_proto(query.last_seen)
        )

    @unary_errors
    async def QueryEnvelopes(self, request: api.QueryEnvelopesRequest, context: Context) -> bytes:
        query = self._query_of(request.query)
        rows = await self._store.query(query, effective_limit(request.limit))
        return wire.repeated(1, (r.raw for r in rows))

    @unary_errors
    async def GetNewestEnvelope(
        self, request: api.GetNewestEnvelopeRequest, context: Context
    ) -> bytes:
        topics = list(request.topics)
        if len(topics) > MAX_QUERY_TOPICS:
            raise Rejected(
                Reason.LIMIT_EXCEEDED, f"{len(topics)} topics, the limit is {MAX_QUERY_TOPICS}"
            )
        for i, topic in enumerate(topics):
            try:
                Topic.parse(topic)
            except TopicError as exc:
                raise Rejected(Reason.BAD_TOPIC, f"topics[{i}]: {exc}") from None
        newest = await self._store.newest(topics)
        return wire.repeated(1, (wire.field(1, raw) if raw else b"" for raw in newest))

    @unary_errors
    async def GetInboxIds(
        self, request: api.GetInboxIdsRequest, context: Context
    ) -> api.GetInboxIdsResponse:
        requests = list(request.requests)
        if len(requests) > MAX_QUERY_TOPICS:
            raise Rejected(
                Reason.LIMIT_EXCEEDED,
                f"{len(requests)} identifiers, the limit is {MAX_QUERY_TOPICS}",
            )
        keys = [(r.identifier, int(r.identifier_kind)) for r in requests]
        resolver = self.inbox_resolver
        inboxes = await resolver.inbox_ids(keys) if resolver else [None] * len(keys)
        responses = []
        for r, inbox in zip(requests, inboxes, strict=True):
            response = api.GetInboxIdsResponse.Response(
                identifier=r.identifier, identifier_kind=r.identifier_kind
            )
            if inbox is not None:
                response.inbox_id = inbox
            responses.append(response)
        return api.GetInboxIdsResponse(responses=responses)

    # --- subscribe -----------------------------------------------------------------------

    async def _deliveries(
        self, groups: list[EnvelopeQuery], method: str
    ) -> AsyncIterator[Delivery]:
        subscription = Subscription(
            groups, self._store.query, self._fanout, keepalive_s=self._keepalive_s
        )
        self._subscriptions.add(subscription)
        gauge = OPEN_SUBSCRIPTIONS.labels(method)
        gauge.inc()
        try:
            async for delivery in subscription.deliveries():
                yield delivery
        finally:
            gauge.dec()
            self._subscriptions.discard(subscription)
        raise Rejected(Reason.UNAVAILABLE, "node is shutting down; resubscribe from your cursor")

    @stream_errors
    async def SubscribeEnvelopes(
        self, request: api.SubscribeEnvelopesRequest, context: Context
    ) -> AsyncIterator[bytes]:
        query = self._query_of(request.query)
        async for delivery in self._deliveries([query], "SubscribeEnvelopes"):
            if delivery.phase in (Phase.CATCHUP, Phase.LIVE):
                for chunk in _chunks(delivery.envelopes):
                    yield wire.repeated(1, chunk)
            else:
                yield b""  # caught up, or keepalive: an empty response

    @stream_errors
    async def SubscribeOriginators(
        self, request: api.SubscribeOriginatorsRequest, context: Context
    ) -> AsyncIterator[bytes]:
        flt = request.filter
        query = EnvelopeQuery.validated(
            [], list(flt.originator_node_ids), cursor_from_proto(flt.last_seen)
        )
        async for delivery in self._deliveries([query], "SubscribeOriginators"):
            if delivery.phase in (Phase.CATCHUP, Phase.LIVE):
                for chunk in _chunks(delivery.envelopes):
                    yield wire.field(1, wire.repeated(1, chunk))
            else:
                yield wire.field(1, b"")

    @stream_errors
    async def SubscribeTopics(
        self, request: api.SubscribeTopicsRequest, context: Context
    ) -> AsyncIterator[bytes]:
        groups = self._topic_groups(request)
        yield _topics_status(_TOPICS_STATUS.SUBSCRIPTION_STATUS_STARTED)
        async for delivery in self._deliveries(groups, "SubscribeTopics"):
            if delivery.phase in (Phase.CATCHUP, Phase.LIVE):
                for chunk in _chunks(delivery.envelopes):
                    yield wire.field(1, wire.repeated(1, chunk))
            elif delivery.phase is Phase.CAUGHT_UP:
                yield _topics_status(_TOPICS_STATUS.SUBSCRIPTION_STATUS_CATCHUP_COMPLETE)
            else:
                yield _topics_status(_TOPICS_STATUS.SUBSCRIPTION_STATUS_WAITING)

    @staticmethod
    def _topic_groups(request: api.SubscribeTopicsRequest) -> list[EnvelopeQuery]:
        """Topics that share a cursor are caught up by one query."""
        if not request.filters:
            raise Rejected(Reason.MALFORMED, "filters is empty")
        if len(request.filters) > MAX_QUERY_TOPICS:
            raise Rejected(
                Reason.LIMIT_EXCEEDED,
                f"{len(request.filters)} topic filters, the limit is {MAX_QUERY_TOPICS}",
            )
        by_cursor: dict[bytes, list[bytes]] = {}
        cursors = {}
        for f in request.filters:
            cursor = cursor_from_proto(f.last_seen)
            key = f.last_seen.SerializeToString(deterministic=True)
            by_cursor.setdefault(key, []).append(f.topic)
            cursors[key] = cursor
        return [EnvelopeQuery.validated(t, [], cursors[k]) for k, t in by_cursor.items()]
