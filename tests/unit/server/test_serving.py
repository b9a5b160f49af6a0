"""The health service as a node and the gateway serve it: Check answers on the event loop
(no thread-pool hop), with the statuses the servicer holds, and NOT_FOUND for unknown
names."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator

import grpc
import pytest
from grpc_health.v1 import health, health_pb2

from xnode.client.grpc_services import health_check
from xnode.server.serving import CheckOnTheLoop, add_health_and_reflection

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.fixture
async def served() -> AsyncIterator[tuple[health.HealthServicer, grpc.aio.Channel]]:
    server = grpc.aio.server()
    servicer = add_health_and_reflection(server, [])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield servicer, channel
    await server.stop(None)


def test_check_is_a_coroutine_function_so_grpc_aio_runs_it_on_the_loop() -> None:
    assert inspect.iscoroutinefunction(CheckOnTheLoop.Check)


async def test_check_answers_what_the_servicer_holds(
    served: tuple[health.HealthServicer, grpc.aio.Channel],
) -> None:
    servicer, channel = served
    stub = health_check(channel)
    servicer.set("publish", NOT_SERVING)
    overall = await stub(health_pb2.HealthCheckRequest(service=""), timeout=5)
    publish = await stub(health_pb2.HealthCheckRequest(service="publish"), timeout=5)
    assert (overall.status, publish.status) == (SERVING, NOT_SERVING)
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await stub(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=5)
    assert unknown.value.code() is grpc.StatusCode.NOT_FOUND
