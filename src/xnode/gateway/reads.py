"""The read APIs, served by the gateway with failover between nodes (docs/gateway.md).

The official client reads from one URL for as long as the application keeps its connection;
GetNodes names the gateway, so that URL stays good while nodes die or hang. Each read goes
to the topic's preferred node (XIP-49 3.3.6: where its writers publish) among the nodes that
pass their health checks, and to the next one when a node fails; a stream that loses its
node resumes on another from the cursor of what it passed on, so nothing is lost or repeated.
Everything passed on is checked first (gateway/read_checks.py). Each call stands alone: the
client's request carries its cursor, so any gateway behind one address can serve any call.
Every call to a node names the client's address in `x-forwarded-for` (api.proxies): nodes
that trust the gateway limit each client apart rather than the gateway as one caller."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import structlog

from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xmtp.xmtpv4.message_api import query_api_pb2
from xnode.api.proxies import ClientAddresses, forwarded_for
from xnode.client.network import FAILOVER_CODES
from xnode.core import wire
from xnode.core.backoff import Backoff
from xnode.core.client_checks import EnvelopeCheckFailed
from xnode.core.cursors import Cursor
from xnode.core.envelopes import cursor_from_proto, cursor_to_proto
from xnode.core.errors import Rejected
from xnode.core.originator_selection import available_nodes, failover_order
from xnode.core.registry import NodeEntry
from xnode.gateway.channels import NodeChannels, UnusableUrl
from xnode.gateway.clients import ClientAuth, Unauthenticated
from xnode.gateway.errors import GatewayError, abort_gateway_error, gateway_errors
from xnode.gateway.node_health import NodeHealth, cut_when
from xnode.gateway.read_checks import AnswerChecks, check_newest, envelopes_of
from xnode.observability.metrics import GATEWAY_READ_FAILOVERS
from xnode.usecases.registry_source import RegistrySource

log = structlog.get_logger(__name__)

# The services' descriptors: the HTTP port (gRPC-web) reads methods' message types there.
READ_SERVICES = (
    api.DESCRIPTOR.services_by_name["ReplicationApi"].full_name,
    query_api_pb2.DESCRIPTOR.services_by_name["QueryApi"].full_name,
)
Context = grpc.aio.ServicerContext[Any, Any]
Check = Callable[[bytes], None]
Metadata = tuple[tuple[str, str], ...]
SUBSCRIBE = "SubscribeEnvelopes"
CLOSING = "the gateway is shutting down; resubscribe from your cursor"
HEALTH = "health_check"  # the cause of a failover when a node fails its health check


class NodeFailed(Exception):
    """One node could not answer this read; another may."""

    def __init__(self, node_id: int, detail: str) -> None:
        super().__init__(detail)
        self.node_id = node_id
        self.detail = detail


def _identity(data: bytes) -> bytes:
    return data


class Reads:
    def __init__(
        self,
        registry: RegistrySource,
        channels: NodeChannels,
        health: NodeHealth,
        timeout_s: float,
        failover_s: float,
        addresses: ClientAddresses,
        clock_ns: Callable[[], int] = time.time_ns,
        auth: ClientAuth | None = None,
    ) -> None:
        """`timeout_s`: longest wait for one node's answer; `failover_s`: how long a stream
        looks for a node that takes it before it ends UNAVAILABLE; `addresses`: where a
        client calls from (its peer, or what a trusted proxy says); `auth`: the API keys or
        JWTs every read must carry (None: reads are open)."""
        self._auth = auth
        self._addresses = addresses
        self._registry = registry
        self._channels = channels
        self._health = health
        self._timeout_s = timeout_s
        self._failover_s = failover_s
        self._clock_ns = clock_ns
        self._closing = asyncio.Event()

    def close(self) -> None:
        """Ends every stream UNAVAILABLE now (the gateway stops): the clients resubscribe
        from their cursors, through another gateway behind the same address."""
        self._closing.set()

    def _keys(self) -> dict[int, bytes]:
        return self._registry.current().public_keys()

    def _order(self, key: bytes) -> list[NodeEntry]:
        """3.3.6's order for `key`, nodes that fail their checks or just failed a call last."""
        nodes = available_nodes(self._registry.current())
        by_id = {n.node_id: n for n in nodes}
        order = failover_order(key, nodes)
        return [
            by_id[i]
            for i in sorted(
                order, key=lambda i: (self._health.is_down(i), self._channels.recently_down(i))
            )
        ]

    def _failed(self, node_id: int, method: str, cause: str, detail: str) -> NodeFailed:
        log.info("gateway_read_failed_over", node_id=node_id, method=method, error=detail)
        GATEWAY_READ_FAILOVERS.labels(method, str(node_id), cause).inc()
        self._health.report_failure(node_id)
        return NodeFailed(node_id, detail)

    def _refused(self, node_id: int, method: str, exc: EnvelopeCheckFailed) -> NodeFailed:
        """The node's answer broke a rule of XIP-49 3.3.4: not passed on, the next answers."""
        log.warning("gateway_answer_refused", node_id=node_id, method=method, error=str(exc))
        GATEWAY_READ_FAILOVERS.labels(method, str(node_id), "check_failed").inc()
        self._health.report_failure(node_id)
        return NodeFailed(node_id, f"answer failed a check: {exc}")

    def _call_failed(self, node_id: int, method: str, exc: grpc.aio.AioRpcError) -> NodeFailed:
        detail = f"{exc.code().name}: {exc.details()}"
        return self._failed(node_id, method, exc.code().name, detail)

    async def _unary_from(
        self,
        node: NodeEntry,
        path: str,
        request: bytes,
        check: Check,
        context: Context,
        client: Metadata,
    ) -> bytes:
        method = path.rpartition("/")[2]
        try:
            channel = self._channels.channel(node.http_address)
        except UnusableUrl as exc:
            raise NodeFailed(node.node_id, str(exc)) from None
        remaining = context.time_remaining()
        timeout = self._timeout_s if remaining is None else min(remaining, self._timeout_s)
        call = channel.unary_unary(path, _identity, _identity)(
            request, timeout=timeout, metadata=client
        )
        with self._health.cut_when_down(node.node_id, call) as down:
            try:
                answer: bytes = await call
            except asyncio.CancelledError:
                if not down.is_set():
                    raise
                raise self._failed(
                    node.node_id, method, HEALTH, "failed its health check"
                ) from None
            except grpc.aio.AioRpcError as exc:
                if exc.code() not in FAILOVER_CODES:
                    # The request's own fault: every node would say so. Its words go back.
                    raise GatewayError(exc.code(), exc.details() or "") from None
                raise self._call_failed(node.node_id, method, exc) from None
        try:
            check(answer)
        except EnvelopeCheckFailed as exc:
            raise self._refused(node.node_id, method, exc) from None
        return answer

    def _admit(self, context: Context) -> str:
        """The client's address; Unauthenticated when reads need a key it did not send."""
        address = self._addresses.of(context)
        if self._auth is not None:
            self._auth.client_of(context.invocation_metadata() or (), address)
        return address

    async def unary(
        self, path: str, request: bytes, key: bytes, check: Check, context: Context
    ) -> bytes:
        failures: list[NodeFailed] = []
        client = forwarded_for(self._admit(context))
        for node in self._order(key):
            try:
                return await self._unary_from(node, path, request, check, context, client)
            except NodeFailed as exc:
                failures.append(exc)
        tried = "; ".join(f"node {f.node_id}: {f.detail}" for f in failures) or "no enabled node"
        raise GatewayError(grpc.StatusCode.UNAVAILABLE, f"no node answered ({tried}); retry later")

    # -- the handlers ---------------------------------------------------------------------

    async def QueryEnvelopes(self, path: str, request: bytes, context: Context) -> bytes:
        parsed = _decode(api.QueryEnvelopesRequest, request)
        start = _cursor(parsed.query)

        def check(answer: bytes) -> None:
            checks = AnswerChecks(self._keys, parsed.query, start, self._clock_ns)
            for raw in envelopes_of(answer):
                checks.envelope(raw)

        key = parsed.query.topics[0] if parsed.query.topics else b""
        return await self.unary(path, request, key, check, context)

    async def GetNewestEnvelope(self, path: str, request: bytes, context: Context) -> bytes:
        parsed = _decode(api.GetNewestEnvelopeRequest, request)
        topics = list(parsed.topics)
        key = topics[0] if topics else b""
        return await self.unary(
            path,
            request,
            key,
            lambda answer: check_newest(self._keys(), topics, answer),
            context,
        )

    async def GetInboxIds(self, path: str, request: bytes, context: Context) -> bytes:
        # A node's answer from its replayed identity state carries no signature to check;
        # the client checks the inbox's identity updates (signed, from the chain) itself.
        _decode(api.GetInboxIdsRequest, request)
        return await self.unary(path, request, request, lambda _: None, context)

    async def SubscribeEnvelopes(
        self, path: str, request: bytes, context: Context
    ) -> AsyncIterator[bytes]:
        client = forwarded_for(self._admit(context))
        parsed = _decode(api.SubscribeEnvelopesRequest, request)
        checks = AnswerChecks(self._keys, parsed.query, _cursor(parsed.query), self._clock_ns)
        key = parsed.query.topics[0] if parsed.query.topics else b""
        backoff = Backoff(0.05, 1.0)
        give_up = time.monotonic() + self._failover_s
        while not self._closing.is_set():
            for node in self._order(key):
                try:
                    async for frame in self._stream_from(node, path, parsed, checks, client):
                        backoff.reset()
                        give_up = time.monotonic() + self._failover_s
                        yield frame
                except NodeFailed:
                    continue
            if time.monotonic() > give_up:
                raise GatewayError(
                    grpc.StatusCode.UNAVAILABLE,
                    "no node takes the subscription; resubscribe from your cursor later",
                )
            await asyncio.sleep(backoff.next_delay())
        raise GatewayError(grpc.StatusCode.UNAVAILABLE, CLOSING)

    async def _stream_from(
        self,
        node: NodeEntry,
        path: str,
        parsed: api.SubscribeEnvelopesRequest,
        checks: AnswerChecks,
        client: Metadata,
    ) -> AsyncIterator[bytes]:
        """Frames of `node`'s stream from the cursor, checked; NodeFailed when it fails."""
        resumed = api.SubscribeEnvelopesRequest()
        resumed.CopyFrom(parsed)
        resumed.query.last_seen.CopyFrom(cursor_to_proto(checks.cursor))
        try:
            channel = self._channels.stream_channel(node.http_address)
        except UnusableUrl as exc:
            raise NodeFailed(node.node_id, str(exc)) from None
        call = channel.unary_stream(path, _identity, _identity)(
            resumed.SerializeToString(), metadata=client
        )
        with self._health.cut_when_down(node.node_id, call) as down, cut_when(self._closing, call):
            try:
                async for frame in call:
                    accepted, failed = checks.envelopes(envelopes_of(frame))
                    if accepted or not frame:
                        yield wire.repeated(1, accepted)
                    if failed is not None:
                        raise self._refused(node.node_id, SUBSCRIBE, failed)
            except asyncio.CancelledError:
                if self._closing.is_set():
                    raise GatewayError(grpc.StatusCode.UNAVAILABLE, CLOSING) from None
                if not down.is_set():
                    raise
                detail = "failed its health check"
                raise self._failed(node.node_id, SUBSCRIBE, HEALTH, detail) from None
            except grpc.aio.AioRpcError as exc:
                if exc.code() not in FAILOVER_CODES:
                    raise GatewayError(exc.code(), exc.details() or "") from None
                raise self._call_failed(node.node_id, SUBSCRIBE, exc) from None
            finally:
                call.cancel()
        raise self._failed(node.node_id, SUBSCRIBE, "ended", "the node ended the stream")


def _decode(kind: Any, request: bytes) -> Any:
    try:
        return kind.FromString(request)
    except Exception as exc:  # protobuf's DecodeError, or worse on hostile bytes
        raise GatewayError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"request does not decode as {kind.DESCRIPTOR.full_name}: {exc}",
        ) from None


def _cursor(query: api.EnvelopesQuery) -> Cursor:
    try:
        return cursor_from_proto(query.last_seen, "query.last_seen")
    except Rejected as exc:
        raise GatewayError(grpc.StatusCode.INVALID_ARGUMENT, exc.detail) from None


def read_handlers(reads: Reads) -> list[grpc.GenericRpcHandler]:
    """The read methods of ReplicationApi and QueryApi; each call is sent on to the node
    under the name the client used."""
    return [grpc.method_handlers_generic_handler(s, _methods(reads, s)) for s in READ_SERVICES]


def _methods(reads: Reads, service: str) -> dict[str, grpc.RpcMethodHandler[Any, Any]]:
    def unary(name: str) -> grpc.RpcMethodHandler[Any, Any]:
        method = getattr(reads, name)
        path = f"/{service}/{name}"

        async def handler(request: bytes, context: Context) -> bytes:
            answer: bytes = await method(path, request, context)
            return answer

        return grpc.unary_unary_rpc_method_handler(
            gateway_errors(handler), request_deserializer=_identity, response_serializer=_identity
        )

    subscribe_path = f"/{service}/SubscribeEnvelopes"

    async def subscribe(request: bytes, context: Context) -> AsyncIterator[bytes]:
        try:
            async for frame in reads.SubscribeEnvelopes(subscribe_path, request, context):
                yield frame
        except (GatewayError, Unauthenticated) as exc:
            await abort_gateway_error(context, exc)

    return {
        "QueryEnvelopes": unary("QueryEnvelopes"),
        "GetNewestEnvelope": unary("GetNewestEnvelope"),
        "GetInboxIds": unary("GetInboxIds"),
        "SubscribeEnvelopes": grpc.unary_stream_rpc_method_handler(
            subscribe, request_deserializer=_identity, response_serializer=_identity
        ),
    }
