"""Jepsen-style, a network: nodes 100, 200 and 300 replicate, node 100's database on Patroni
(a primary and a synchronous standby), under publish load on node 100. The primary's host is
killed (kill -9), or cut off: its links to the node and to etcd drop every packet (TCP proxies
turned into a blackhole). Every acknowledged envelope survives with its sequence id and bytes,
the ids stay gap-free, node 100 serves again within 15 s of the promotion, and the peers end
up holding node 100's whole log."""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import pytest

from tests.conftest import REPLICATION_TEST_SETTINGS, Network, NodeProcess, ha_root, start_ha
from tests.e2e.ops.test_ha import A, Fault, fail_over, signalled
from tests.e2e.ops.test_restore import log_of
from tests.tcp_link import Link
from tests.waiting import eventually
from xnode.devtools.devnet import wait_serving
from xnode.devtools.patroni import MEMBERS, HaCluster
from xnode.devtools.postgres import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

PEERS_CONVERGE_S = 60.0


@dataclass
class Isolable:
    """A Patroni cluster whose members the node reaches through `to_node` links and which
    reach etcd through `to_etcd` links, one of each per member."""

    cluster: HaCluster
    to_node: dict[str, Link]
    to_etcd: dict[str, Link]

    def dsn(self, database: str) -> str:
        hosts = ",".join(self.to_node[m].address for m in MEMBERS)
        return f"postgresql://postgres@{hosts}/{database}?target_session_attrs=read-write"

    def cut(self, member: str, cut: bool) -> None:
        """The member's host loses (or gets back) the node and etcd; its standby streaming
        from it or to it is left alone, as on a network whose database hosts share a link."""
        for link in (self.to_node[member], self.to_etcd[member]):
            link.set_cut(cut, blackhole=True)

    @property
    def fault(self) -> Fault:
        return Fault(lambda m: self.cut(m, True), lambda m: self.cut(m, False))


@pytest.fixture
async def isolable() -> AsyncIterator[Isolable]:
    links = {(m, kind): Link() for m in MEMBERS for kind in ("node", "etcd")}
    for link in links.values():
        await link.start()
    etcd_port = free_port()
    for (_, kind), link in links.items():
        if kind == "etcd":
            link.upstream = f"127.0.0.1:{etcd_port}"
    via = {m: links[(m, "etcd")].address for m in MEMBERS}
    with ha_root() as root:
        # In a thread: the links serve on this loop while the members start.
        cluster = await asyncio.to_thread(start_ha, root, etcd_port=etcd_port, etcd_via=via)
        for m in MEMBERS:
            links[(m, "node")].upstream = f"127.0.0.1:{cluster.members[m].pg_port}"
        try:
            yield Isolable(
                cluster,
                {m: links[(m, "node")] for m in MEMBERS},
                {m: links[(m, "etcd")] for m in MEMBERS},
            )
        finally:
            await asyncio.to_thread(cluster.stop)
            for link in links.values():
                await link.stop()


def start_network(
    network: Network, spawn: Callable[..., NodeProcess], ha: Isolable
) -> tuple[NodeProcess, str]:
    """Nodes 100 (on `ha`), 200 and 300 (on the shared cluster); node 100 and the DSN of
    its database, reached directly (not through the links). Run it in a thread: the links
    serve on the test's loop."""
    name = f"ha_{uuid.uuid4().hex[:8]}"
    ha.cluster.create_database(name)
    network.dsns[A] = ha.dsn(name)
    own = {A: {"database_primary_check_seconds": "0.2", "limits_enabled": "false"}}
    settings = {k: str(v) for k, v in REPLICATION_TEST_SETTINGS.items()}
    nodes = {
        n: spawn(
            network.dsns[n], network.spec, n, wait=False,
            listen_address=network.addresses[n], **settings, **own.get(n, {}),
        )
        for n in network.spec.keys
    }  # fmt: skip
    for n, node in nodes.items():
        if not wait_serving(network.addresses[n], 60):
            pytest.fail(f"node {n} did not start:\n{node.output()[-3000:]}")
    node = nodes[A]
    node.address = network.addresses[A]
    return node, ha.cluster.dsn(name)


async def peers_converge(network: Network, dsn: str) -> None:
    """Nodes 200 and 300 hold node 100's whole log, id for id and byte for byte."""
    whole = await log_of(dsn, A)

    async def held() -> bool:
        return all([await log_of(network.dsns[p], A) == whole for p in (200, 300)])

    await eventually(held, PEERS_CONVERGE_S, f"peers holding node {A}'s {len(whole)} envelopes")


async def test_primary_killed(
    isolable: Isolable, network: Network, spawn_node: Callable[..., NodeProcess]
) -> None:
    node, dsn = await asyncio.to_thread(start_network, network, spawn_node, isolable)
    load = await fail_over(isolable.cluster, node, dsn, signalled(isolable.cluster, signal.SIGKILL))
    assert load.refused, "the lost primary was never noticed"
    await peers_converge(network, dsn)


async def test_primary_cut_off(
    isolable: Isolable, network: Network, spawn_node: Callable[..., NodeProcess]
) -> None:
    node, dsn = await asyncio.to_thread(start_network, network, spawn_node, isolable)
    await fail_over(isolable.cluster, node, dsn, isolable.fault)
    await peers_converge(network, dsn)
