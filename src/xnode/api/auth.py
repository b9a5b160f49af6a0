"""Node authentication on the server (XIP-49 3.2.5): replication streams need a valid node
token; client APIs stay open.

Protected: ReplicationApi.SubscribeOriginators, the node-to-node stream. SubscribeEnvelopes
stays open even when it asks by originator ids: it is the XIP's client API (3.3.3), clients
and tools use it, and every envelope it returns is signed and end-to-end encrypted, so the
token is about telling nodes apart (their streams are long-lived and bulk), not secrecy.

An accepted stream ends with UNAUTHENTICATED once its token expires or its node is disabled
(checked before each response, so at least every keepalive); the peer reconnects with a
fresh token, which renews the check the XIP asks for at least hourly.

Read-only nodes (XIP-49 3.4) have no registry entry: their tokens name their key's address
(core.node_tokens). With `read_only_peers` they may open SubscribeOriginators too, and are
limited as their client IP, in its buckets: anyone can make such a token, so it buys no
limits of its own.

A token that does not parse, verify or name an enabled node is refused (UNAUTHENTICATED on
the replication stream, the limits of a client elsewhere), logged once per cause."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, cast

import grpc
import structlog

from xnode.api.proxies import ClientAddresses
from xnode.core.clock import SYSTEM_CLOCK, Clock
from xnode.core.cursors import Cursor
from xnode.core.envelopes import cursor_to_proto
from xnode.core.node_tokens import (
    CLOCK_METADATA,
    METADATA_KEY,
    XIP_METADATA_KEY,
    AuthError,
    NodeIdentity,
    token_from_metadata,
    verify_token,
)
from xnode.core.registry import Registry
from xnode.observability.metrics import AUTH_REFUSED
from xnode.usecases.limits import Caller

log = structlog.get_logger(__name__)

MAX_KNOWN_TOKENS = 1024
MAX_LOGGED_CAUSES = 256  # causes of refused tokens already logged, then forgotten at once
_NUMBERS = re.compile(r"\d+")
_TOKEN_KEYS = frozenset({METADATA_KEY, XIP_METADATA_KEY})
PROTECTED_METHODS = frozenset({"/xmtp.xmtpv4.message_api.ReplicationApi/SubscribeOriginators"})

Context = grpc.aio.ServicerContext[Any, Any]
StreamBehavior = Callable[[Any, Context], AsyncIterator[Any]]

# The servers' interceptors' base, and the next step each is handed (grpc's handlers are
# generic to the type checker only).
Interceptor = grpc.aio.ServerInterceptor
if TYPE_CHECKING:
    Continuation = Callable[
        [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]
    ]


class NodeAuthInterceptor(Interceptor):
    def __init__(
        self,
        node_id: int,
        registry: Callable[[], Registry],
        vector_clock: Callable[[], Cursor],
        protected: frozenset[str] = PROTECTED_METHODS,
        clock: Clock = SYSTEM_CLOCK,
        read_only_peers: bool = True,
        addresses: ClientAddresses | None = None,
    ) -> None:
        self._clock = clock
        self._addresses = addresses or ClientAddresses()
        self._read_only_peers = read_only_peers
        self._node_id = node_id
        self._registry = registry
        self._vector_clock = vector_clock
        self._protected = protected
        self._known: dict[str, NodeIdentity] = {}
        self._logged: set[str] = set()

    async def intercept_service(
        self,
        continuation: Continuation,
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        if handler_call_details.method not in self._protected or handler is None:
            return handler
        if handler.unary_stream is None:
            raise TypeError(f"{handler_call_details.method}: only server streams are guarded")
        return grpc.unary_stream_rpc_method_handler(
            self._guard(cast(StreamBehavior, handler.unary_stream), handler_call_details.method),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def authenticate(self, metadata: Any) -> NodeIdentity:
        token = token_from_metadata(metadata or ())
        now = int(self._clock.now_s())
        return verify_token(token, self._registry(), self._node_id, now, self._read_only_peers)

    def caller(self, context: Context) -> Caller:
        """The caller for the API limits: its node id when it sent a valid node token (peers
        get their own, higher limits), else its client IP, which a trusted proxy may name
        (api.proxies; read-only nodes: their peer's IP, with their own limits). Tokens are
        cached until they expire (an hour after their iat at most) so a peer's requests do
        not each recover a signature; each use of a cached one checks the registry again, so
        a node disabled there loses its peer limits at once."""
        identity: NodeIdentity | None = None
        metadata = context.invocation_metadata() or ()
        if not any(key in _TOKEN_KEYS for key, _ in metadata):
            return self._client(context)  # a client: no token (no exception either)
        try:
            token = token_from_metadata(metadata)
        except AuthError:
            return self._client(context)
        cached = self._known.get(token)
        if cached is not None and self._revoked(cached) is None:
            identity = cached
        else:
            self._known.pop(token, None)
            try:
                identity = self.authenticate(metadata)
            except AuthError as exc:
                self._refused(context, exc)
                identity = None
            if identity is not None:
                if len(self._known) >= MAX_KNOWN_TOKENS:
                    self._known.clear()
                self._known[token] = identity
        if identity is None:
            return self._client(context)
        if identity.read_only:
            # A read-only token is made by anyone for free: its holder is limited as its
            # client IP, in the same buckets (a token must not buy a second set).
            return self._client(context)
        return Caller.from_peer(context.peer(), identity.node_id)

    def _refused(self, context: Context, exc: AuthError, method: str = "") -> None:
        """Counts a refused token; logs it once per cause (the reason with its numbers
        left out), so a flood of bad tokens costs one log line, not one per call."""
        AUTH_REFUSED.inc()
        cause = _NUMBERS.sub("N", str(exc))
        if cause in self._logged:
            return
        if len(self._logged) >= MAX_LOGGED_CAUSES:
            self._logged.clear()
        self._logged.add(cause)
        log.info(
            "node_auth_refused",
            method=method or None,
            peer=context.peer(),
            reason=str(exc),
            detail="logged once per cause; xnode_node_auth_refused_total counts them all",
        )

    def _client(self, context: Context) -> Caller:
        return Caller(self._addresses.of(context))

    def _revoked(self, identity: NodeIdentity) -> str | None:
        if self._clock.now_s() >= identity.expires_at:
            return "token expired; reconnect with a new one"
        if identity.node_id is None:
            return None  # a read-only node: nothing in the registry to lose
        entry = self._registry().get(identity.node_id)
        if entry is None or not entry.enabled:
            return f"node {identity.node_id} is no longer enabled in the registry"
        return None

    def _guard(self, behavior: StreamBehavior, method: str) -> StreamBehavior:
        async def guarded(request: Any, context: Context) -> AsyncIterator[Any]:
            try:
                identity = self.authenticate(context.invocation_metadata())
            except AuthError as exc:
                self._refused(context, exc, method)
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(exc))
                return
            clock = cursor_to_proto(self._vector_clock()).SerializeToString()
            await context.send_initial_metadata(((CLOCK_METADATA, clock),))
            async for item in behavior(request, context):
                reason = self._revoked(identity)
                if reason is not None:
                    await context.abort(grpc.StatusCode.UNAUTHENTICATED, reason)
                yield item

        return guarded
