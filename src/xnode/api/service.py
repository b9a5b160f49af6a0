"""The envelope API: ReplicationApi, QueryApi and PublishApi share these handlers.

Handlers translate protobuf to use-case calls (xnode.usecases.publish, .query, .subscribe)
and frame the answers; xnode.api.registration maps refusals to statuses. Responses that carry
stored envelopes are framed from the stored bytes (see xnode.core.wire), so handlers return
serialized messages."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import grpc

from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xnode.core import wire
from xnode.core.envelopes import cursor_from_proto
from xnode.core.query import EnvelopeQuery
from xnode.usecases.fanout import Batch
from xnode.usecases.limits import Caller
from xnode.usecases.publish import Publish
from xnode.usecases.query import Query
from xnode.usecases.subscribe import Subscribe, topic_groups
from xnode.usecases.subscription import Delivery, Phase

Context = grpc.aio.ServicerContext[Any, Any]
MAX_STREAM_MESSAGE_BYTES = 4 * 1024 * 1024

_TOPICS_STATUS = api.SubscribeTopicsResponse.SubscriptionStatus


def _chunks(batches: list[Batch]) -> Iterable[bytes]:
    """The batches' framed envelopes, joined into stream messages of at most a few MiB (a
    batch beyond that alone is split by envelope)."""
    parts: list[bytes] = []
    size = 0
    for batch in batches:
        framed = batch.framed
        if len(framed) > MAX_STREAM_MESSAGE_BYTES:
            pieces = [wire.field(1, env.raw) for env in batch.envelopes]
        else:
            pieces = [framed]
        for piece in pieces:
            if parts and size + len(piece) > MAX_STREAM_MESSAGE_BYTES:
                yield b"".join(parts)
                parts, size = [], 0
            parts.append(piece)
            size += len(piece)
    if parts:
        yield b"".join(parts)


def _topics_status(status: int) -> bytes:
    return api.SubscribeTopicsResponse(
        status_update=api.SubscribeTopicsResponse.StatusUpdate(status=status)  # type: ignore[arg-type]
    ).SerializeToString()


# How each subscribe RPC frames a delivery: a list of serialized responses.
Framing = Callable[[Delivery], Iterable[bytes]]


def _envelopes_frames(delivery: Delivery) -> Iterable[bytes]:
    if delivery.phase in (Phase.CATCHUP, Phase.LIVE):
        return _chunks(delivery.batches)
    return [b""]  # caught up, or keepalive: an empty response


def _originators_frames(delivery: Delivery) -> Iterable[bytes]:
    if delivery.phase in (Phase.CATCHUP, Phase.LIVE):
        return (wire.field(1, chunk) for chunk in _chunks(delivery.batches))
    return [wire.field(1, b"")]


def _topics_frames(delivery: Delivery) -> Iterable[bytes]:
    if delivery.phase in (Phase.CATCHUP, Phase.LIVE):
        return (wire.field(1, chunk) for chunk in _chunks(delivery.batches))
    if delivery.phase is Phase.CAUGHT_UP:
        return [_topics_status(_TOPICS_STATUS.SUBSCRIPTION_STATUS_CATCHUP_COMPLETE)]
    return [_topics_status(_TOPICS_STATUS.SUBSCRIPTION_STATUS_WAITING)]


def _query_of(query: api.EnvelopesQuery) -> EnvelopeQuery:
    return EnvelopeQuery.validated(
        list(query.topics),
        list(query.originator_node_ids),
        cursor_from_proto(query.last_seen, "query.last_seen"),
    )


def peer_caller(context: Context) -> Caller:
    """The caller as its client IP alone (no node tokens looked at)."""
    return Caller.from_peer(context.peer())


class EnvelopeService:
    def __init__(
        self,
        publish: Publish,
        query: Query,
        subscribe: Subscribe,
        caller_of: Callable[[Context], Caller] = peer_caller,
    ) -> None:
        self._publish = publish
        self._query = query
        self._subscribe = subscribe
        self._caller_of = caller_of

    async def PublishPayerEnvelopes(
        self, request: api.PublishPayerEnvelopesRequest, context: Context
    ) -> bytes:
        published = await self._publish(request.payer_envelopes, self._caller_of(context))
        return wire.repeated(1, published)

    async def QueryEnvelopes(self, request: api.QueryEnvelopesRequest, context: Context) -> bytes:
        rows = await self._query.envelopes(
            _query_of(request.query), request.limit, self._caller_of(context)
        )
        return wire.repeated(1, (r.raw for r in rows))

    async def GetNewestEnvelope(
        self, request: api.GetNewestEnvelopeRequest, context: Context
    ) -> bytes:
        await self._query.admit(self._caller_of(context))
        newest = await self._query.newest(list(request.topics))
        return wire.repeated(1, (wire.field(1, raw) if raw else b"" for raw in newest))

    async def GetInboxIds(
        self, request: api.GetInboxIdsRequest, context: Context
    ) -> api.GetInboxIdsResponse:
        await self._query.admit(self._caller_of(context))
        requests = list(request.requests)
        inboxes = await self._query.inbox_ids(
            [(r.identifier, int(r.identifier_kind)) for r in requests]
        )
        responses = []
        for r, inbox in zip(requests, inboxes, strict=True):
            response = api.GetInboxIdsResponse.Response(
                identifier=r.identifier, identifier_kind=r.identifier_kind
            )
            if inbox is not None:
                response.inbox_id = inbox
            responses.append(response)
        return api.GetInboxIdsResponse(responses=responses)

    async def _stream(
        self, groups: list[EnvelopeQuery], method: str, framing: Framing, context: Context
    ) -> AsyncIterator[bytes]:
        async for delivery in self._subscribe(groups, method, self._caller_of(context)):
            for frame in framing(delivery):
                yield frame

    # Not generators themselves: the stream's own generator is iterated directly, one level
    # fewer on every delivery. A bad request raises when called, inside the error mapping.
    def SubscribeEnvelopes(
        self, request: api.SubscribeEnvelopesRequest, context: Context
    ) -> AsyncIterator[bytes]:
        groups = [_query_of(request.query)]
        return self._stream(groups, "SubscribeEnvelopes", _envelopes_frames, context)

    def SubscribeOriginators(
        self, request: api.SubscribeOriginatorsRequest, context: Context
    ) -> AsyncIterator[bytes]:
        flt = request.filter
        groups = [
            EnvelopeQuery.validated(
                [],
                list(flt.originator_node_ids),
                cursor_from_proto(flt.last_seen, "filter.last_seen"),
            )
        ]
        return self._stream(groups, "SubscribeOriginators", _originators_frames, context)

    async def SubscribeTopics(
        self, request: api.SubscribeTopicsRequest, context: Context
    ) -> AsyncIterator[bytes]:
        groups = topic_groups(
            [
                (f.topic, cursor_from_proto(f.last_seen, f"filters[{i}].last_seen"))
                for i, f in enumerate(request.filters)
            ]
        )
        yield _topics_status(_TOPICS_STATUS.SUBSCRIPTION_STATUS_STARTED)
        async for frame in self._stream(groups, "SubscribeTopics", _topics_frames, context):
            yield frame
