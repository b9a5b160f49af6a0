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
