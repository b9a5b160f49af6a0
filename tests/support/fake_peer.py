"""A deliberately misbehaving peer's server: it serves ReplicationApi methods from a script."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

Subscribe = Callable[[bytes, Any], AsyncIterator[bytes]]


async def serve_subscribe_originators(subscribe: Subscribe, address: str) -> grpc.aio.Server:
    """A started server at `address` whose only method is ReplicationApi/SubscribeOriginators,
    answered by `subscribe(request bytes, context)` with serialized responses."""
    handler = grpc.unary_stream_rpc_method_handler(
        subscribe, request_deserializer=bytes, response_serializer=bytes
    )
    return await serve_replication_methods({"SubscribeOriginators": handler}, address)


async def serve_replication_methods(
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]],
    address: str,
    health: Callable[[bytes, Any], Awaitable[bytes]] | None = None,
    service: str = "xmtp.xmtpv4.message_api.ReplicationApi",
) -> grpc.aio.Server:
    """A started server at `address` answering these methods of `service` only (handlers
    made with grpc.unary_unary_rpc_method_handler and friends, on bytes), and
    grpc.health.v1.Health/Check with `health` when given."""
    server = grpc.aio.server()
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(service, handlers)])
    if health is not None:
        check = grpc.unary_unary_rpc_method_handler(
            health, request_deserializer=bytes, response_serializer=bytes
        )
        server.add_generic_rpc_handlers(
            [grpc.method_handlers_generic_handler("grpc.health.v1.Health", {"Check": check})]
        )
    server.add_insecure_port(address)
    await server.start()
    return server


class _Forwarding(grpc.GenericRpcHandler):
    def __init__(
        self, channel: grpc.aio.Channel, overrides: dict[str, grpc.RpcMethodHandler[Any, Any]]
    ) -> None:
        self._channel = channel
        self._overrides = overrides

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler[Any, Any]:
        method: str = details.method
        if method in self._overrides:
            return self._overrides[method]
        if "/Subscribe" in method:
            return grpc.unary_stream_rpc_method_handler(self._stream(method))
        return grpc.unary_unary_rpc_method_handler(self._unary(method))

    @staticmethod
    def _metadata(context: Any) -> list[tuple[str, str]]:
        return [
            (k, v)
            for k, v in context.invocation_metadata() or ()
            if not k.startswith((":", "grpc-"))
        ]

    def _unary(self, method: str) -> Callable[[bytes, Any], Awaitable[bytes]]:
        async def forward(request: bytes, context: Any) -> bytes:
            call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = self._channel.unary_unary(method)
            try:
                answer: bytes = await call(request, metadata=self._metadata(context))
            except grpc.aio.AioRpcError as exc:
                await context.abort(exc.code(), exc.details() or "")
            return answer

        return forward

    def _stream(self, method: str) -> Callable[[bytes, Any], AsyncIterator[bytes]]:
        async def forward(request: bytes, context: Any) -> AsyncIterator[bytes]:
            call: grpc.aio.UnaryStreamMultiCallable[bytes, bytes] = self._channel.unary_stream(
                method
            )
            try:
                async for answer in call(request, metadata=self._metadata(context)):
                    yield answer
            except grpc.aio.AioRpcError as exc:
                await context.abort(exc.code(), exc.details() or "")

        return forward


async def serve_proxy(
    target: str, address: str, overrides: dict[str, grpc.RpcMethodHandler[Any, Any]]
) -> grpc.aio.Server:
    """A started server at `address` that forwards every call (bytes and metadata) to the
    node at `target`, except the full method names in `overrides`, which it answers itself:
    a node that misbehaves in those methods only."""
    channel = grpc.aio.insecure_channel(target)
    server = grpc.aio.server()
    server.add_generic_rpc_handlers([_Forwarding(channel, overrides)])
    server.add_insecure_port(address)
    await server.start()
    return server
