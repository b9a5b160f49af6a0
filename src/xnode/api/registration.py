"""Registers the envelope service under every service name the network uses.

Handlers return already-serialized responses, so the response serializer is the identity."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError, Message

from xmtp.xmtpv4.message_api import (
    message_api_pb2,
    misbehavior_api_pb2,
    publish_api_pb2,
    query_api_pb2,
)
from xnode.api.errors import count_rejected, stream_errors, unary_errors
from xnode.api.misbehavior import MisbehaviorService
from xnode.api.service import EnvelopeService
from xnode.core.errors import Reason
from xnode.observability.metrics import REQUEST_LATENCY
from xnode.observability.outage import DatabaseOutage

PACKAGE = "xmtp.xmtpv4.message_api"
SERVICES = {
    "ReplicationApi": message_api_pb2,
    "QueryApi": query_api_pb2,
    "PublishApi": publish_api_pb2,
}
MISBEHAVIOR_SERVICE = f"{PACKAGE}.MisbehaviorApi"
# Short names: the `api` label of xnode_requests_rejected_total and health service names.
SHORT_NAMES = {"ReplicationApi": "replication", "QueryApi": "query", "PublishApi": "publish"}


# Handlers that frame stored envelopes themselves and return bytes (see xnode.core.wire).
RAW_RESPONSES = frozenset(
    {
        "PublishPayerEnvelopes",
        "QueryEnvelopes",
        "GetNewestEnvelope",
        "SubscribeEnvelopes",
        "SubscribeOriginators",
        "SubscribeTopics",
    }
)


def _identity(data: bytes) -> bytes:
    return data


def _serialize(message: Message) -> bytes:
    return message.SerializeToString()


async def _decode(
    message_type: type[Message],
    data: bytes,
    context: grpc.aio.ServicerContext[Any, Any],
    called: tuple[str, str],
) -> Message:
    """Decodes here rather than in grpc, so a corrupt request is INVALID_ARGUMENT."""
    try:
        return message_type.FromString(data)
    except DecodeError as exc:
        count_rejected(*called, Reason.MALFORMED.value)
        await context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"request does not decode as {message_type.DESCRIPTOR.full_name}: {exc}",
        )
    raise AssertionError("unreachable: abort raises")


def method_handler(
    service: Any, method: Any, module: Any, api: str, outage: DatabaseOutage
) -> grpc.RpcMethodHandler[Any, Any]:
    """A handler for `method` (a MethodDescriptor) calling the same-named method of service,
    called under the API named `api`; store failures are told to `outage`."""
    message_type = getattr(module, method.input_type.name)
    serialize: Callable[[Any], bytes] = _identity if method.name in RAW_RESPONSES else _serialize
    if method.server_streaming:
        streaming = stream_errors(getattr(service, method.name), api, method.name, outage)

        async def stream(data: bytes, context: Any) -> AsyncIterator[Any]:
            request = await _decode(message_type, data, context, (api, method.name))
            async for item in streaming(request, context):
                yield item

        return grpc.unary_stream_rpc_method_handler(
            stream, request_deserializer=_identity, response_serializer=serialize
        )

    behavior = unary_errors(getattr(service, method.name), api, method.name, outage)
    latency = REQUEST_LATENCY.labels(api, method.name)

    async def unary(data: bytes, context: Any) -> Any:
        started = time.perf_counter()
        try:
            try:  # here, not in _decode: one coroutine fewer per request that decodes
                request = message_type.FromString(data)
            except DecodeError:
                request = await _decode(message_type, data, context, (api, method.name))
            return await behavior(request, context)
        finally:
            latency.observe(time.perf_counter() - started)

    return grpc.unary_unary_rpc_method_handler(
        unary, request_deserializer=_identity, response_serializer=serialize
    )


def envelope_handlers(
    service: EnvelopeService, outage: DatabaseOutage
) -> list[grpc.GenericRpcHandler]:
    handlers = []
    for name, module in SERVICES.items():
        descriptor = module.DESCRIPTOR.services_by_name[name]
        methods = {
            m.name: method_handler(service, m, message_api_pb2, SHORT_NAMES[name], outage)
            for m in descriptor.methods
        }
        handlers.append(grpc.method_handlers_generic_handler(f"{PACKAGE}.{name}", methods))
    return handlers


def misbehavior_handlers(
    service: MisbehaviorService, outage: DatabaseOutage
) -> grpc.GenericRpcHandler:
    descriptor = misbehavior_api_pb2.DESCRIPTOR.services_by_name["MisbehaviorApi"]
    methods = {
        m.name: grpc.unary_unary_rpc_method_handler(
            unary_errors(getattr(service, m.name), "misbehavior", m.name, outage),
            request_deserializer=getattr(misbehavior_api_pb2, m.input_type.name).FromString,
            response_serializer=_identity,
        )
        for m in descriptor.methods
    }
    return grpc.method_handlers_generic_handler(MISBEHAVIOR_SERVICE, methods)


def service_names() -> list[str]:
    return [*(f"{PACKAGE}.{name}" for name in SERVICES), MISBEHAVIOR_SERVICE]
