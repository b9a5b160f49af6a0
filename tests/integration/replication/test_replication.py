"""Replication between in-process nodes on a real Postgres: delivery, live fan-out on the
receiving node, depends_on against replicated originators, registry changes."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest
from prometheus_client import REGISTRY

from tests.conftest import Network
from tests.support.waiting import eventually
from xnode.client.node import NodeClient, envelopes_of, group_message_envelope
from xnode.core.crypto import SigningKey
from xnode.core.cursors import Cursor
from xnode.core.envelopes import build_payer_envelope, parse_originator_envelope
from xnode.core.registry import Registry

PAYER = SigningKey.generate()
GROUP = bytes(range(16))
TOPIC = b"\x00" + GROUP


async def stored(address: str, originator: int) -> list[bytes]:
    async with NodeClient(address) as client:
        found: list[bytes] = []
        cursor = Cursor()
        while page := await client.query(originators=[originator], cursor=cursor, limit=1000):
            found += [e.SerializeToString() for e in page]
            last = parse_originator_envelope(found[-1])
            cursor = Cursor({originator: last.sequence_id})
        return found


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_published_envelopes_reach_the_peer_byte_for_byte(
    start_node: Any, network: Network
) -> None:
    received = metric("xnode_replication_envelopes_received_total", originator="100")
    a = await start_node(**network.settings(100))
    b = await start_node(**network.settings(200))
    async with NodeClient(a.address) as client:
        sent = await client.publish_group_messages(PAYER, 100, GROUP, [b"one", b"two", b"three"])

    async def b_has_them() -> bool:
        return len(await stored(b.address, 100)) == 3

    await eventually(b_has_them)
    assert await stored(b.address, 100) == [e.SerializeToString() for e in sent]
    assert b.state.clock.value[100] == 3

    # Both nodes run in this process, so they share the metrics registry; the counters move
    # just after the rows commit.
    async def counted() -> bool:
        count = metric("xnode_replication_envelopes_received_total", originator="100")
        return count == received + 3

    await eventually(counted)
    assert metric("xnode_replication_lag_sequence_ids", originator="100") == 0
    assert metric("xnode_replication_streams", mode="direct") >= 1  # B reading from A


async def test_live_subscriber_on_the_peer_gets_replicated_envelopes(
    start_node: Any, network: Network
) -> None:
    a = await start_node(**network.settings(100))
    b = await start_node(**network.settings(200))
    async with NodeClient(b.address) as reader, NodeClient(a.address) as writer:
        call = reader.subscribe(topics=[TOPIC])
        responses = aiter(call)
        caught_up = await asyncio.wait_for(anext(responses), 10)
        assert not caught_up.envelopes  # caught up: what is published from here is live
        sent = await writer.publish_group_messages(PAYER, 100, GROUP, [b"live"])
        got = await asyncio.wait_for(anext(envelopes_of(call)), 10)
        call.cancel()
    assert got.SerializeToString() == sent[0].SerializeToString()


async def test_depends_on_ahead_of_the_replicated_position_is_refused_then_accepted(
    start_node: Any, network: Network
) -> None:
    a = await start_node(**network.settings(100))
    async with NodeClient(a.address) as writer:
        await writer.publish_group_messages(PAYER, 100, GROUP, [b"x", b"y"])
    dependent = build_payer_envelope(
        group_message_envelope(GROUP, b"reply", depends_on=Cursor({100: 2})), PAYER, 200
    )
    # Node 200 is not running yet: start it only after 100 has the envelopes, then race it.
    b = await start_node(**network.settings(200))
    async with NodeClient(b.address) as client:
        try:
            await client.publish([dependent])
        except grpc.aio.AioRpcError as exc:  # it may not have caught up yet: then ABORTED
            assert exc.code() == grpc.StatusCode.ABORTED
            assert "depends_on is ahead" in (exc.details() or "")

        async def accepted() -> bool:
            try:
                await client.publish([dependent])
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.ABORTED
                return False
            return True

        await eventually(accepted)


async def test_depends_on_a_peer_that_is_not_replicated_is_refused(
    start_node: Any, network: Network
) -> None:
    b = await start_node(**network.settings(200))  # node 100 never runs
    dependent = build_payer_envelope(
        group_message_envelope(GROUP, b"reply", depends_on=Cursor({100: 1})), PAYER, 200
    )
    async with NodeClient(b.address) as client:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client.publish([dependent])
    assert err.value.code() == grpc.StatusCode.ABORTED
    assert "100:1" in (err.value.details() or "")


async def test_added_node_is_connected_without_restart(start_node: Any, network: Network) -> None:
    full = network.spec.nodes_file.read_text()
    with_300 = network.spec.directory / "nodes-with-300.json"
    with_300.write_text(full)
    registry = Registry.from_json(full)
    del registry.nodes[300]
    network.spec.nodes_file.write_text(registry.to_json())
    b = await start_node(**network.settings(200))
    c = await start_node(**network.settings(300, nodes_file=str(with_300)))
    worker = b.replication
    assert worker is not None and sorted(worker.links) == [100]
    async with NodeClient(c.address) as client:
        await client.publish_group_messages(PAYER, 300, GROUP, [b"from 300"])
    network.spec.nodes_file.write_text(full)

    async def b_has_it() -> bool:
        return len(await stored(b.address, 300)) == 1

    await eventually(b_has_it)
    assert worker.links[300].direct_running


async def test_disabled_node_is_disconnected_and_reconnected_when_enabled(
    start_node: Any, network: Network
) -> None:
    b = await start_node(**network.settings(200))
    await start_node(**network.settings(300))
    worker = b.replication
    assert worker is not None
    assert sorted(worker.links) == [100, 300]
    network.set_enabled(100, False)

    async def disconnected() -> bool:
        return not worker.links[100].direct_running

    await eventually(disconnected)

    async def relayed() -> bool:  # 100's envelopes now come through 300, for a while
        return bool(worker.links[100].fallback_peers == [300])

    await eventually(relayed)
    network.set_enabled(100, True)

    async def reconnected() -> bool:
        return bool(worker.links[100].direct_running)

    await eventually(reconnected)


async def test_grpc_stream_failure_falls_back_and_returns(
    start_node: Any, network: Network
) -> None:
    """Node 300 is down: 200 fetches 300's envelopes through 100; when 300 is back, the
    direct stream returns and the fallback is torn down."""
    c = await start_node(**network.settings(300))
    async with NodeClient(c.address) as client:
        await client.publish_group_messages(PAYER, 300, GROUP, [b"c1", b"c2"])
    a = await start_node(**network.settings(100))

    async def a_has_them() -> bool:
        return len(await stored(a.address, 300)) == 2

    await eventually(a_has_them)
    await c.stop()
    b = await start_node(**network.settings(200))
    worker = b.replication
    assert worker is not None

    async def b_has_them() -> bool:
        return len(await stored(b.address, 300)) == 2

    await eventually(b_has_them)
    assert worker.links[300].unreachable
    assert worker.links[300].fallback_peers == [100]
