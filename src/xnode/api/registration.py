"""Registers the envelope service under every service name the network uses.

Handlers return already-serialized responses, so the response serializer is the identity."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf.message import Message

from xmtp.xmtpv4.message_api import (
    message_api_pb2,
    misbehavior_api_pb2,
    publish_api_pb2,
    query_api_pb2,
)
from xnode.api.service import EnvelopeService

PACKAGE = "xmtp.xmtpv4.message_api"
SERVICES = {
    "ReplicationApi": message_api_pb2,
    "QueryApi": query_api_pb2,
    "PublishApi": publish_api_pb2,
}
MISBEHAVIOR_SERVICE = f"{PACKAGE}.MisbehaviorApi"
_ = misbehavior_api_pb2  # loaded so reflection can describe MisbehaviorApi once it is served


def _identity(data: bytes) -> bytes:
    return data


def _serialize(message: Message) -> bytes:
    return message.SerializeToString()


def _handler(service: EnvelopeService, method: Any) -> grpc.RpcMethodHandler[Any, Any]:
    behavior = getattr(service, method.name)
    deserialize = getattr(message_api_pb2, method.input_type.name).FromString
    serialize: Callable[[Any], bytes] = _serialize if method.name == "GetInboxIds" else _identity
    if method.server_streaming:
        return grpc.unary_stream_rpc_method_handler(
            behavior, request_deserializer=deserialize, response_serializer=serialize
        )
    return grpc.unary_unary_rpc_method_handler(
        behavior, request_deserializer=deserialize, response_serializer=serialize
    )


def envelope_handlers(service: EnvelopeService) -> list[grpc.GenericRpcHandler[Any, Any]]:
    handlers = []
    for name, module in SERVICES.items():
        descriptor = module.DESCRIPTOR.services_by_name[name]
        methods = {m.name: _handler(service, m) for m in descriptor.methods}
        handlers.append(grpc.method_handlers_generic_handler(f"{PACKAGE}.{name}", methods))
    return handlers


def service_names() -> list[str]:
    return [f"{PACKAGE}.{name}" for name in SERVICES]
