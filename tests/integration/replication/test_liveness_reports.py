"""Liveness reports (XIP-49 3.2.7) a node files about a peer: slow first answers and error
statuses. The peer is a small gRPC server in the test standing in for node 200."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from tests.conftest import Network
from tests.support.fake_peer import serve_subscribe_originators
from tests.support.waiting import eventually_value
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.core import wire

Behavior = Callable[[Any], Awaitable[None]]


async def serve_fake(address: str, behave: Behavior) -> grpc.aio.Server:
    async def subscribe(request: bytes, context: Any) -> AsyncIterator[bytes]:
        if list(api.SubscribeOriginatorsRequest.FromString(request).filter.originator_node_ids) != [
            200
        ]:
            await asyncio.sleep(3600)  # asked to relay someone else's envelopes: has none
        await behave(context)
        yield wire.field(1, b"")  # "caught up": an empty answer
        await asyncio.sleep(3600)

    return await serve_subscribe_originators(subscribe, address)


async def reports_about(node: Any, node_id: int) -> list[mb.UnsignedMisbehaviorReport]:
    rows = await node.pool.fetch("SELECT report FROM misbehavior_reports ORDER BY id")
    reports = [mb.MisbehaviorReport.FromString(r[0]) for r in rows]
    unsigned = [
        mb.UnsignedMisbehaviorReport.FromString(r.unsigned_misbehavior_report) for r in reports
    ]
    return [u for u in unsigned if u.misbehaving_node_id == node_id]


async def wait_for_report(node: Any, kind: int) -> mb.UnsignedMisbehaviorReport:

    async def found() -> list[mb.UnsignedMisbehaviorReport]:
        return [r for r in await reports_about(node, 200) if r.type == kind]

    # Failures are retried with backoff, so the report may take a few rounds.
    reports = await eventually_value(
        found, bool, what=f"a {mb.Misbehavior.Name(mb.Misbehavior.ValueType(kind))} report"
    )
    return reports[0]


async def test_a_slow_first_answer_is_reported_with_its_time(
    start_node: Any, network: Network
) -> None:
    async def slowly(_context: Any) -> None:
        await asyncio.sleep(0.6)

    server = await serve_fake(network.addresses[200], slowly)
    try:
        node = await start_node(**network.settings(100, replication_slow_seconds=0.3))
        report = await wait_for_report(node, mb.MISBEHAVIOR_SLOW_NODE)
    finally:
        await server.stop(None)
    assert report.submitted_by_node
    assert 0.5e9 < report.liveness.response_time_ns < 2e9
    assert list(report.liveness.subscribe.query.originator_node_ids) == [200]


async def test_an_error_status_is_a_failed_request(start_node: Any, network: Network) -> None:
    async def refuse(context: Any) -> None:
        await context.abort(grpc.StatusCode.INTERNAL, "disk on fire")

    server = await serve_fake(network.addresses[200], refuse)
    try:
        node = await start_node(**network.settings(100))
        report = await wait_for_report(node, mb.MISBEHAVIOR_FAILED_REQUEST)
    finally:
        await server.stop(None)
    assert report.liveness.subscribe.query.originator_node_ids == [200]
    worker = node.replication
    assert worker is not None and worker.links[200].unreachable  # so others relay its envelopes


async def test_a_peer_refusing_connections_is_unresponsive_only_after_t(
    start_node: Any, network: Network
) -> None:
    """Peers that start together refuse each other for a moment: nobody is reported for
    that. A peer still unreachable after T is."""
    response_s = 2.0
    node = await start_node(
        **network.settings(100, replication_response_timeout_seconds=response_s)
    )
    asked = asyncio.Event()

    async def answers(_context: Any) -> None:
        asked.set()

    await asyncio.sleep(response_s / 4)  # node 200 is not listening yet: refused
    server = await serve_fake(network.addresses[200], answers)
    try:
        async with asyncio.timeout(30):
            await asked.wait()
        assert await reports_about(node, 200) == []
    finally:
        await server.stop(None)
    report = await wait_for_report(node, mb.MISBEHAVIOR_UNRESPONSIVE_NODE)
    assert report.liveness.response_time_ns >= response_s * 1e9
