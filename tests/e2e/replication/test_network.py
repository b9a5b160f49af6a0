"""Three `xnode run` processes replicating on real Postgres, registry on a real anvil: they
converge, survive a kill -9 under load, and get a disabled node's envelopes through others."""

from __future__ import annotations

import asyncio
import contextlib

import grpc

from tests.e2e.replication.conftest import ChainNetwork
from tests.support.waiting import eventually
from xnode.client.node import NodeClient
from xnode.core.crypto import SigningKey

NODES = (100, 200, 300)
PAYER = SigningKey.generate()
GROUPS = [bytes([g]) * 16 for g in range(4)]


async def converged(network: ChainNetwork, node_ids: tuple[int, ...] = NODES) -> bool:
    clocks = [await network.vector_clock(n) for n in node_ids]
    if any(c != clocks[0] for c in clocks):
        return False
    stored = [await network.envelopes(n, NODES) for n in node_ids]
    return all(s == stored[0] for s in stored)


async def test_payloads_published_to_different_nodes_reach_every_node(
    chain_network: ChainNetwork,
) -> None:
    chain_network.start(*NODES)
    sent: dict[int, list[bytes]] = {}
    for node_id in NODES:
        async with NodeClient(chain_network.addresses[node_id]) as client:
            payloads = [b"%d-%d" % (node_id, i) for i in range(50)]
            envelopes = await client.publish_group_messages(PAYER, node_id, GROUPS[0], payloads)
            sent[node_id] = [e.SerializeToString() for e in envelopes]

    async def done() -> bool:
        return await converged(chain_network)

    await eventually(done)
    everything = [raw for n in NODES for raw in sent[n]]
    for node_id in NODES:
        assert await chain_network.vector_clock(node_id) == {100: 50, 200: 50, 300: 50}
        assert await chain_network.envelopes(node_id, NODES) == everything


async def _load(address: str, node_id: int, acked: list[bytes], stop: asyncio.Event) -> None:
    """Publishes small batches until stopped; keeps what the node acknowledged."""
    i = 0
    async with NodeClient(address) as client:
        while not stop.is_set():
            payloads = [b"load-%d-%d" % (node_id, i + k) for k in range(5)]
            i += 5
            try:
                got = await client.publish_group_messages(PAYER, node_id, GROUPS[i % 4], payloads)
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.05)  # the node is down: keep trying until it is back
                continue
            acked += [e.SerializeToString() for e in got]


async def test_kill_9_under_load_then_restart_converges_with_nothing_lost(
    chain_network: ChainNetwork,
) -> None:
    chain_network.start(*NODES)
    stop = asyncio.Event()
    acked: dict[int, list[bytes]] = {n: [] for n in NODES}
    loads = [
        asyncio.create_task(_load(chain_network.addresses[n], n, acked[n], stop)) for n in NODES
    ]
    try:
        await asyncio.sleep(1.5)
        chain_network.kill(300)  # SIGKILL: no shutdown, mid-publish and mid-replication
        await asyncio.sleep(1.5)
        chain_network.start(300)
        await asyncio.sleep(1.5)
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.gather(*loads)
    assert all(len(acked[n]) > 20 for n in NODES), {n: len(a) for n, a in acked.items()}

    async def done() -> bool:
        return await converged(chain_network)

    await eventually(done, within_s=60)
    for node_id in NODES:
        stored = set(await chain_network.envelopes(node_id, NODES))
        for origin in NODES:
            assert set(acked[origin]) <= stored, f"node {node_id} lost some of {origin}'s"


async def test_a_disabled_nodes_envelopes_reach_a_node_that_missed_them_through_others(
    chain_network: ChainNetwork,
) -> None:
    chain_network.start(100, 200)
    async with NodeClient(chain_network.addresses[100]) as client:
        sent = await client.publish_group_messages(
            PAYER, 100, GROUPS[1], [b"%d" % i for i in range(30)]
        )

    async def relayed_by_200() -> bool:
        return len(await chain_network.envelopes(200, [100])) == 30

    await eventually(relayed_by_200)
    chain_network.kill(100)
    chain_network.set_enabled(100, False)
    chain_network.start(300)  # never saw node 100 running, and 100 is now disabled

    async def reached_300() -> bool:
        return len(await chain_network.envelopes(300, [100])) == 30

    await eventually(reached_300)
    assert await chain_network.envelopes(300, [100]) == [e.SerializeToString() for e in sent]
    log = chain_network.processes[300].output()
    assert '"event": "peer_disabled"' in log and '"through": [200]' in log
