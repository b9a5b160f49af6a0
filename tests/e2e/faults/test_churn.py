"""Membership churn: the NodeRegistry on a real anvil changes while the network is split and
while nodes restart, under publish load.

Every node is registered at the address of a TCP proxy this test controls (its inbound link):
cutting node 100's leaves it running and serving its own clients, unreachable by its peers.
- Added during a partition: with node 100 cut off, node 400 is added to the registry and
  started; it catches up with 100's envelopes from the peers that hold them (200, 300), before
  the heal.
- Disabled during a restart: node 200 is stopped (SIGTERM), disabled in the registry while it
  is down, and node 300 restarts meanwhile (kill -9). Node 200's envelopes stay readable from
  every peer (XIP-49 3.2.6).
In the end every running node holds every acknowledged envelope of every originator, and the
only misbehavior reports are UNRESPONSIVE_NODE, of nodes unreachable while the faults lasted
(the cut node, the stopped ones, and node 400 between its registration and its first answer):
none of a fork, a gap, an order or a payload, against anyone."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable

import asyncpg
import grpc
import pytest

from tests.conftest import ChainEnv, NodeProcess, NodeSpec
from tests.e2e.replication.conftest import ChainNetwork
from tests.support.tcp_link import Link
from tests.support.waiting import eventually
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.chain.admin import add_node, node_address
from xnode.client.node import NodeClient
from xnode.core.crypto import SigningKey
from xnode.core.cursors import Cursor
from xnode.core.envelopes import parse_originator_envelope
from xnode.devtools.devnet import wait_serving
from xnode.devtools.postgres import PgCluster, free_port

PAYER = SigningKey.generate()
GROUP = bytes([0x5C]) * 16
NEW = 400


async def _load(
    network: ChainNetwork, node_id: int, acked: dict[int, set[bytes]], stop: asyncio.Event
) -> None:
    """Publishes to `node_id` while it is up; keeps what it acknowledged."""
    i = 0
    async with NodeClient(network.addresses[node_id]) as client:
        while not stop.is_set():
            payloads = [b"churn-%d-%d-%s" % (node_id, i, uuid.uuid4().bytes) for _ in range(3)]
            i += 1
            try:
                sent = await client.publish_group_messages(PAYER, node_id, GROUP, payloads)
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.2)  # down or draining: try again later
                continue
            acked[node_id] |= {e.SerializeToString() for e in sent}
            await asyncio.sleep(0.1)


async def _start(network: ChainNetwork, *node_ids: int) -> None:
    """As ChainNetwork.start, with the patience of a loaded machine (a node's start there can
    take more than a minute)."""
    for n in node_ids:
        network.processes[n] = network.spawn(
            network.dsns[n], network.spec, n, wait=False, listen_address=network.addresses[n],
            **network.env(),
        )  # fmt: skip
    for n in node_ids:
        if not await asyncio.to_thread(wait_serving, network.addresses[n], 180):
            pytest.fail(f"node {n} did not start:\n{network.processes[n].output()[-3000:]}")


async def _holds(network: ChainNetwork, node_id: int, wanted: set[bytes], origin: int) -> bool:
    return wanted <= set(await network.envelopes(node_id, [origin]))


async def _served(address: str, originator: int) -> set[bytes]:
    """Every envelope of `originator` the node at `address` serves, page by page."""
    served: set[bytes] = set()
    last = 0
    async with NodeClient(address) as client:
        while page := await client.query(
            originators=[originator], cursor=Cursor({originator: last})
        ):
            served |= {e.SerializeToString() for e in page}
            last = parse_originator_envelope(page[-1].SerializeToString()).sequence_id
    return served


async def _reports(dsn: str) -> list[tuple[int, int]]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch("SELECT type, misbehaving_node_id FROM misbehavior_reports")
    finally:
        await conn.close()
    return [(r[0], r[1]) for r in rows]


async def test_a_node_added_during_a_partition_and_one_disabled_during_restarts_lose_nothing(
    chain_env: ChainEnv,
    pg_cluster: PgCluster,
    node_spec: NodeSpec,
    spawn_node: Callable[..., NodeProcess],
) -> None:
    node_spec.keys[NEW] = SigningKey.generate()
    nodes = sorted(node_spec.keys)
    first = [n for n in nodes if n != NEW]
    addresses = {n: f"127.0.0.1:{free_port()}" for n in nodes}
    links = {n: Link() for n in nodes}  # node n's inbound link
    for n, link in links.items():
        await link.start()
        link.upstream = addresses[n]
    new_key = node_spec.keys.pop(NEW)  # registered later
    chain_env.register(node_spec, {n: links[n].address for n in first})
    node_spec.keys[NEW] = new_key
    dsns = {}
    for n in nodes:
        name = f"ch_{uuid.uuid4().hex[:10]}"
        pg_cluster.create_database(name)
        dsns[n] = pg_cluster.dsn(name)
    network = ChainNetwork(chain_env, node_spec, spawn_node, addresses, dsns)
    acked: dict[int, set[bytes]] = {n: set() for n in nodes}
    stop = asyncio.Event()
    loads: list[asyncio.Task[None]] = []
    try:
        await _start(network, *first)
        loads = [asyncio.create_task(_load(network, n, acked, stop)) for n in first]
        await eventually(lambda: all(len(acked[n]) >= 15 for n in first), what="load acked")

        # Added during a partition: 100 is cut off; 400 joins and catches up from 200 and 300.
        links[100].set_cut(True)
        before_cut = set(acked[100])
        got = add_node(
            chain_env.w3,
            chain_env.owner,
            chain_env.contracts_file,
            new_key.public_key,
            f"http://{links[NEW].address}",
        )
        assert got == NEW
        chain_env.rpc("anvil_setBalance", node_address(new_key.public_key), hex(10**21))
        await _start(network, NEW)

        # What 100 acknowledged before the cut, and the others then, must reach 400 with 100
        # still cut off: from the peers that hold them (a fallback through its delivery group).
        wanted = {100: before_cut, 200: set(acked[200]), 300: set(acked[300])}

        async def missing_at_400() -> dict[int, int]:
            held = {o: set(await network.envelopes(NEW, [o])) for o in wanted}
            return {o: len(wanted[o] - held[o]) for o in wanted}

        async def caught_up_without_100() -> bool:
            return not any((await missing_at_400()).values())

        with contextlib.suppress(AssertionError):
            await eventually(caught_up_without_100, within_s=60)
        assert not any((missing := await missing_at_400()).values()), f"400 lacks {missing}"
        links[100].set_cut(False)

        # Disabled during restarts: 200 stops, is disabled while down; 300 is killed meanwhile.
        stop_200 = asyncio.to_thread(network.processes.pop(200).terminate)
        network.kill(300)
        await stop_200
        network.set_enabled(200, False)
        await _start(network, 300)
        await asyncio.sleep(1)  # the load goes on against 100, 300 and 400's peers
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.gather(*loads)

    running = [100, 300, NEW]

    async def converged() -> bool:
        for n in running:
            for origin in first:
                if not await _holds(network, n, acked[origin], origin):
                    return False
        return True

    try:
        await eventually(converged, within_s=60, what="every running node holds every envelope")
        # 200 is disabled: its envelopes stay readable from every peer, through the API.
        for n in running:
            assert acked[200] <= await _served(addresses[n], 200), n
        for n in running:
            unreachable = mb.Misbehavior.MISBEHAVIOR_UNRESPONSIVE_NODE
            reports = await _reports(dsns[n])
            assert [r for r in reports if r[0] != unreachable] == [], (n, reports)
    finally:
        for link in links.values():
            await link.stop()
    counts = [len(await _reports(dsns[n])) for n in running]
    print(
        "churn: acknowledged "
        + ", ".join(f"{n}: {len(acked[n])}" for n in first)
        + f"; every one held by {running}; UNRESPONSIVE_NODE reports held: {counts}"
    )
