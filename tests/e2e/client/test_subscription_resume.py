"""A subscription of xnode.client survives the kill -9 of its node: it resumes on the next
preferred node from its vector-clock cursor, and every envelope arrives exactly once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial

import pytest

from tests.conftest import REPLICATION_TEST_SETTINGS, Network, NodeProcess
from tests.support.waiting import eventually
from xnode.client.network import NetworkClient
from xnode.client.node import NodeClient
from xnode.core.client_checks import CheckedEnvelope
from xnode.core.cursors import Cursor
from xnode.core.originator_selection import available_nodes, failover_order
from xnode.core.registry import Registry
from xnode.core.topics import Topic, TopicKind
from xnode.devtools.devnet import wait_serving

GROUP = bytes(range(16))
TOPIC = Topic(TopicKind.GROUP_MESSAGES, GROUP).raw


def start(network: Network, spawn_node: Callable[..., NodeProcess]) -> dict[int, NodeProcess]:
    settings = {k: str(v) for k, v in REPLICATION_TEST_SETTINGS.items()}
    processes = {
        n: spawn_node(
            network.dsns[n],
            network.spec,
            n,
            wait=False,
            listen_address=network.addresses[n],
            **settings,
        )
        for n in network.addresses
    }
    for n, proc in processes.items():
        if not wait_serving(network.addresses[n], 180):  # a loaded machine starts slowly
            pytest.fail(f"node {n} did not start:\n{proc.output()[-3000:]}")
    return processes


async def holds(address: str, count: int) -> bool:
    async with NodeClient(address) as client:
        return len(await client.query([TOPIC])) >= count


async def test_a_subscription_resumes_on_another_node_with_no_gap_and_no_duplicate(
    network: Network, spawn_node: Callable[..., NodeProcess]
) -> None:
    processes = start(network, spawn_node)
    registry = Registry.from_json(network.spec.nodes_file.read_text())
    first, second, _ = failover_order(TOPIC, available_nodes(registry))
    async with (
        NetworkClient(registry, deadline_s=60) as writer,
        NetworkClient(registry, deadline_s=60) as reader,
    ):
        before = await writer.publish_group_messages(GROUP, [b"before %d" % i for i in range(20)])
        assert {e.originator_node_id for e in before} == {first}, "the preferred node"
        for n in network.addresses:  # replicated everywhere: nothing is lost with `first`
            await eventually(partial(holds, network.addresses[n], 20))

        subscription = reader.subscribe([TOPIC])
        got: list[CheckedEnvelope] = []
        after: list[CheckedEnvelope] = []

        async def read(count: int) -> None:
            async for env in subscription:
                got.append(env)
                if len(got) == count:
                    return

        await asyncio.wait_for(read(10), 60)
        assert subscription.node_id == first
        processes[first].kill()
        after = await writer.publish_group_messages(GROUP, [b"after %d" % i for i in range(20)])
        assert {e.originator_node_id for e in after} == {second}, "failed over"
        await asyncio.wait_for(read(40), 60)
        subscription.close()

    sent = [(e.originator_node_id, e.sequence_id) for e in before + after]
    received = [(e.originator_node_id, e.sequence_id) for e in got]
    assert received == sent, "no gap, no duplicate, in order"
    assert subscription.nodes_used[:2] == [first, second]
    assert after[0].depends_on == Cursor({first: before[-1].sequence_id})
    assert not reader.refusals
