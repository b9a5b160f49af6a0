"""gRPC's standard services, typed: Health/Check (grpc.health.v1) for either kind of channel,
and ServerReflectionInfo (grpc.reflection.v1alpha) for grpc.aio's. The stubs of
grpcio-health-checking and grpcio-reflection give their client stubs no typed methods."""

from __future__ import annotations

from typing import overload

import grpc
from grpc_health.v1.health_pb2 import HealthCheckRequest, HealthCheckResponse
from grpc_reflection.v1alpha.reflection_pb2 import (
    ServerReflectionRequest,
    ServerReflectionResponse,
)

CHECK_METHOD = "/grpc.health.v1.Health/Check"
REFLECTION_METHOD = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"


@overload
def health_check(
    channel: grpc.aio.Channel,
) -> grpc.aio.UnaryUnaryMultiCallable[HealthCheckRequest, HealthCheckResponse]: ...
@overload
def health_check(
    channel: grpc.Channel,
) -> grpc.UnaryUnaryMultiCallable[HealthCheckRequest, HealthCheckResponse]: ...
def health_check(
    channel: grpc.aio.Channel | grpc.Channel,
) -> (
    grpc.aio.UnaryUnaryMultiCallable[HealthCheckRequest, HealthCheckResponse]
    | grpc.UnaryUnaryMultiCallable[HealthCheckRequest, HealthCheckResponse]
):
    """Health/Check on `channel`: call it with a HealthCheckRequest ("" for the whole node)."""
    return channel.unary_unary(
        CHECK_METHOD,
        request_serializer=HealthCheckRequest.SerializeToString,
        response_deserializer=HealthCheckResponse.FromString,
    )


def reflection_info(
    channel: grpc.aio.Channel,
) -> grpc.aio.StreamStreamMultiCallable[ServerReflectionRequest, ServerReflectionResponse]:
    """ServerReflectionInfo on `channel`: call it with an iterator of requests."""
    return channel.stream_stream(
        REFLECTION_METHOD,
        request_serializer=ServerReflectionRequest.SerializeToString,
        response_deserializer=ServerReflectionResponse.FromString,
    )
