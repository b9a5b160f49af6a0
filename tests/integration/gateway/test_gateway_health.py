"""The gateway's node health under load: a slow check is not a dead node, and when every node
looks down the call in flight is still given its chance (xnode.gateway.node_health)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from prometheus_client import REGISTRY
from structlog.testing import capture_logs

from tests.conftest import Network
from tests.integration.gateway.test_gateway import group_id
from tests.integration.gateway.test_gateway_reads import (
    failovers,
    node_answering,
    query,
    reads_stub,
)
from tests.support.fake_peer import serve_replication_methods
from tests.support.waiting import eventually
from xnode.client.node import group_message_envelope
from xnode.core.registry import NodeEntry, Registry
from xnode.gateway.channels import NodeChannels
from xnode.gateway.node_health import NodeHealth
from xnode.usecases.registry_source import WatchedRegistry

CHECK_TIMEOUT_S = 0.5
MISSED_S = 0.000_01  # about no answer comes back this fast
NODES = (100, 200, 300)


def missed_checks(node_id: int) -> float:
    labels = {"node": str(node_id), "outcome": "missed"}
    return REGISTRY.get_sample_value("xnode_gateway_node_checks_total", labels) or 0.0


async def test_publishes_go_through_when_every_health_check_misses(
    start_node: Any, network: Network, gateway_for: Any
) -> None:
    """The gateway's host saturated, as far as its checks can tell: checks are not answered in
    time (a timeout about no answer can meet), so every node looks down. Publishes still go to the
    nodes, which answer them: a call in flight is cut only while another node answers."""
    for node_id in NODES:
        await start_node(**network.settings(node_id))
    missed_before = {n: missed_checks(n) for n in NODES}
    with capture_logs() as logged:
        gateway = await gateway_for(
            node_check_seconds=0.05,
            node_check_timeout_seconds=MISSED_S,
            node_check_connect_timeout_seconds=MISSED_S,
        )

        def every_node_down() -> bool:
            down = {e["node_id"] for e in logged if e["event"] == "gateway_node_down"}
            return down >= set(NODES)

        await eventually(every_node_down, what="this gateway taking every node down")
        # Every publish is answered (an UNAVAILABLE would raise): before, each one was cut
        # on every node at once, "no node could take it". A check may still be answered in
        # time now and then (gRPC's timers are coarser than MISSED_S), and a node so up
        # for a moment may have a call moved off another: a move, never a refusal.
        for i in range(6):
            await gateway.publish([group_message_envelope(group_id(i), b"x")])
    assert all(missed_checks(n) - missed_before[n] >= 2 for n in NODES)


async def test_one_missed_check_is_not_a_dead_node(network: Network) -> None:
    """Node 300 answers its checks, one of them late: it stays up. A node that never answers
    is down after `failures_to_down` checks; one that refuses, at once."""
    slow_once = asyncio.Event()
    hang = asyncio.Event()

    async def health(request: bytes, context: Any) -> bytes:
        if not slow_once.is_set():
            slow_once.set()
            await asyncio.sleep(3 * CHECK_TIMEOUT_S)
        if hang.is_set():
            await asyncio.Event().wait()
        return b"\x08\x01"  # HealthCheckResponse(status=SERVING)

    server = await serve_replication_methods({}, network.addresses[300], health=health)
    registry = Registry.from_json(network.spec.nodes_file.read_text())
    entries: list[NodeEntry] = [registry.nodes[300], registry.nodes[100]]  # 100: not started
    channels = NodeChannels(1 << 20, 5.0)
    checks = NodeHealth(
        WatchedRegistry(Registry(entries)),
        channels,
        0.1,
        CHECK_TIMEOUT_S,
        failures_to_down=2,
        connect_timeout_s=CHECK_TIMEOUT_S,
    )
    checks.start()
    try:
        await eventually(lambda: checks.is_down(100), what="node 100 refused: down at once")
        await eventually(lambda: slow_once.is_set(), what="node 300's slow check")
        await asyncio.sleep(0)
        started = time.monotonic()
        while time.monotonic() - started < 6 * CHECK_TIMEOUT_S:
            assert not checks.is_down(300), "one slow check took node 300 down"
            await asyncio.sleep(0.05)
        hang.set()
        await eventually(lambda: checks.is_down(300), within_s=10, what="a hung node: down")
    finally:
        await checks.stop()
        await channels.close()
        await server.stop(None)


async def test_a_read_on_a_hung_node_is_not_cut_while_no_other_answers(
    start_node: Any, network: Network, gateway_for: Any
) -> None:
    """Only node 300 is up, and it answers its checks and queries slowly (a loaded host):
    marked down, it is still the only node there is, and the query waits for its answer."""
    answer_after_s = 4 * CHECK_TIMEOUT_S

    async def slow(request: bytes, context: Any) -> bytes:
        await asyncio.sleep(answer_after_s)
        return b""

    server = await node_answering(network, slow)
    try:
        gateway = await gateway_for(
            node_check_seconds=0.1,
            node_check_timeout_seconds=CHECK_TIMEOUT_S,
            node_check_connect_timeout_seconds=CHECK_TIMEOUT_S,
        )
        before = failovers("QueryEnvelopes", 300, "health_check")
        answer = await reads_stub(gateway).QueryEnvelopes(query(b"\x00" * 17), timeout=20)
        assert list(answer.envelopes) == []
        assert failovers("QueryEnvelopes", 300, "health_check") == before
    finally:
        await server.stop(None)
