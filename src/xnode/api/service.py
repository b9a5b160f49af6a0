"""The envelope API: ReplicationApi, QueryApi and PublishApi share these handlers.

Handlers translate protobuf to use-case calls (xnode.usecases.publish, .query, .subscribe)
and frame the answers; xnode.api.registration maps refusals to statuses. Responses that carry
stored envelopes are framed from the stored bytes (see xnode.core.wire), so handlers return
serialized messages."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import grpc
import structlog

from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xnode.api.errors import StatusError
from xnode.core import wire
from xnode.core.envelopes import StoredEnvelope, cursor_from_proto
from xnode.core.query import EnvelopeQuery
from xnode.core.sizes import ENVELOPE_FRAMING_OVERHEAD, MIB
from xnode.usecases.fanout import Batch
from xnode.usecases.limits import Caller
from xnode.usecases.publish import Publish
from xnode.usecases.query import Query
from xnode.usecases.subscribe import Subscribe, topic_groups
from xnode.usecases.subscription import Delivery, Phase

log = structlog.get_logger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]
MAX_STREAM_MESSAGE_BYTES = 4 * 1024 * 1024

_TOPICS_STATUS = api.SubscribeTopicsResponse.SubscriptionStatus

# Said in the trailers of an answer the byte budget cut short (core.sizes): `bytes`. The
# client pages on as after a full page: QueryEnvelopes from its last envelope's cursor,
# GetNewestEnvelope for the topics past the answered ones.
ANSWER_CUT_TRAILER = "xnode-answer-cut"
# Envelopes whose bytes could not be sent were logged already (each once per process).
_UNSENDABLE_LOGGED_MAX = 1024


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


def _topics_status(status: _TOPICS_STATUS.ValueType) -> bytes:
    return api.SubscribeTopicsResponse(
        status_update=api.SubscribeTopicsResponse.StatusUpdate(status=status)
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
        max_message_bytes: int = 25 * MIB,
    ) -> None:
        """`max_message_bytes`: the send limit every envelope must fit alone, framed."""
        self._publish = publish
        self._query = query
        self._subscribe = subscribe
        self._caller_of = caller_of
        # One envelope fits one message (core.sizes): checked before anything is sent.
        self._largest_envelope = max_message_bytes - ENVELOPE_FRAMING_OVERHEAD
        self._unsendable_logged: set[tuple[int, int]] = set()

    def _check_sendable(self, envelopes: Iterable[StoredEnvelope]) -> None:
        """Raises RESOURCE_EXHAUSTED, naming it, for an envelope too large to send in one
        message: one stored before the size caps (docs/operations.md, "Sizes and budgets").
        The caps keep new ones from being stored; receivers file no report for this status."""
        for envelope in envelopes:
            if len(envelope.raw) <= self._largest_envelope:
                continue
            key = (envelope.originator_node_id, envelope.sequence_id)
            if key not in self._unsendable_logged:
                if len(self._unsendable_logged) < _UNSENDABLE_LOGGED_MAX:
                    self._unsendable_logged.add(key)
                log.error(
                    "envelope_unsendable",
                    originator=key[0],
                    sequence_id=key[1],
                    size=len(envelope.raw),
                    largest=self._largest_envelope,
                )
            raise StatusError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"envelope {key[0]}:{key[1]} is {len(envelope.raw)} bytes, more than one "
                f"message can carry ({self._largest_envelope} with its framing): it was "
                "stored before this node capped envelope sizes; its operator is told",
            )

    async def PublishPayerEnvelopes(
        self, request: api.PublishPayerEnvelopesRequest, context: Context
    ) -> bytes:
        published = await self._publish(request.payer_envelopes, self._caller_of(context))
        return wire.repeated(1, published)

    async def QueryEnvelopes(self, request: api.QueryEnvelopesRequest, context: Context) -> bytes:
        answer = await self._query.envelopes(
            _query_of(request.query), request.limit, self._caller_of(context)
        )
        self._check_sendable(answer.envelopes)
        if answer.cut:
            context.set_trailing_metadata(((ANSWER_CUT_TRAILER, "bytes"),))
        return wire.repeated(1, (r.raw for r in answer.envelopes))

    async def GetNewestEnvelope(
        self, request: api.GetNewestEnvelopeRequest, context: Context
    ) -> bytes:
        await self._query.admit(self._caller_of(context))
        topics = list(request.topics)
        newest = await self._query.newest(topics)
        for i, raw in enumerate(newest):
            if raw is not None and len(raw) > self._largest_envelope:
                raise StatusError(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"the newest envelope of topics[{i}] is {len(raw)} bytes, more than one "
                    f"message can carry ({self._largest_envelope} with its framing): it was "
                    "stored before this node capped envelope sizes",
                )
        if len(newest) < len(topics):
            context.set_trailing_metadata(((ANSWER_CUT_TRAILER, "bytes"),))
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
            for batch in delivery.batches:
                if len(batch.framed) > self._largest_envelope:  # else each envelope fits
                    self._check_sendable(batch.envelopes)
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
