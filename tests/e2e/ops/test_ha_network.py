"""Jepsen-style, a network: nodes 100, 200 and 300 replicate, node 100's database on Patroni
(a primary and a synchronous standby), under publish load on node 100. The primary's host is
killed (kill -9), frozen for 30 s (SIGSTOP: a paused VM, a long stall; it wakes up after the
standby's promotion), or cut off: its links to the node and to etcd drop every packet (TCP
proxies turned into a blackhole). Every acknowledged envelope survives with its sequence id and
bytes, the ids stay gap-free, node 100 serves again within 15 s of the promotion, and the peers
end up holding node 100's whole log."""

from __future__ import annotations

import asyncio
import json
import signal
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import grpc
import pytest

from tests.conftest import REPLICATION_TEST_SETTINGS, Network, NodeProcess, ha_root, start_ha
from tests.e2e.ops.test_ha import GROUP, PAYER, A
from tests.e2e.ops.test_restore import events, log_of
from tests.support.tcp_link import Link
from tests.support.waiting import eventually, eventually_value
from xnode.client.node import NodeClient
from xnode.core.envelopes import parse_originator_envelope
from xnode.devtools.devnet import wait_serving
from xnode.devtools.patroni import MEMBERS, HaCluster
from xnode.devtools.postgres import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

PEERS_CONVERGE_S = 60.0
PUBLISHERS = 4
SERVE_AGAIN_S = 15.0
FROZEN_S = 30.0
# A failed publish is retried after this pause, as a client backs off.
RETRY_S = 0.05
RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


@dataclass
class Load:
    """What the publishers were told: acknowledged envelopes by sequence id, and when."""

    acked: dict[int, bytes] = field(default_factory=dict)
    answered_at: list[float] = field(default_factory=list)
    refused: dict[str, int] = field(default_factory=dict)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    publishers: list[asyncio.Task[None]] = field(default_factory=list)

    async def count(self) -> int:
        for task in self.publishers:
            if task.done():
                task.result()  # a publisher told something it must not be is the failure
        return len(self.acked)

    async def served_since(self, moment: float) -> bool:
        return any(t > moment for t in self.answered_at)


async def publisher(address: str, load: Load, worker: int) -> None:
    async with NodeClient(address) as client:
        count = 0
        while not load.stop.is_set():
            count += 1
            payload = f"{worker}-{count}".encode()
            try:
                got = await client.publish_group_messages(PAYER, A, GROUP, [payload])
            except grpc.aio.AioRpcError as exc:
                assert exc.code() in RETRYABLE, f"a failover answered {exc.code()}: {exc}"
                load.refused[exc.code().name] = load.refused.get(exc.code().name, 0) + 1
                await asyncio.sleep(RETRY_S)
                continue
            for envelope in got:
                raw = envelope.SerializeToString()
                load.acked[parse_originator_envelope(raw).sequence_id] = raw
            load.answered_at.append(time.monotonic())


@dataclass
class Fault:
    """What happens to the primary's host (`inflict`) and how it comes back (`heal`), each
    given the member's name; the host stays so at least `lasting_s` (a freeze that outlasts
    the promotion, so that the old primary wakes up next to a new one)."""

    inflict: Callable[[str], None]
    heal: Callable[[str], None]
    lasting_s: float = 0.0


def signalled(cluster: HaCluster, sig: signal.Signals, lasting_s: float = 0.0) -> Fault:
    """The host killed (restarted after) or frozen (resumed after)."""
    if sig == signal.SIGKILL:
        return Fault(lambda m: cluster.signal_member(m, sig), cluster.start_member)
    return Fault(
        lambda m: cluster.signal_member(m, sig),
        lambda m: cluster.signal_member(m, signal.SIGCONT),
        lasting_s,
    )


async def fail_over(cluster: HaCluster, node: NodeProcess, dsn: str, fault: Fault) -> Load:
    """Publishes to `node` (its database `dsn` on `cluster`) while the primary's host meets
    `fault`; heals it once the standby is promoted and checks what the publishers were told."""
    load = Load()
    tasks = [asyncio.create_task(publisher(node.address, load, i)) for i in range(PUBLISHERS)]
    load.publishers = tasks
    try:
        await eventually_value(load.count, lambda n: n >= 100, what="publishes before the fault")
        old = await asyncio.to_thread(cluster.leader)
        assert old is not None
        fault.inflict(old)
        inflicted = time.monotonic()
        await eventually_value(
            lambda: asyncio.to_thread(cluster.leader),
            lambda new: new not in (None, old),
            60,
            "the standby promoted",
        )
        promoted = time.monotonic()
        await eventually(
            lambda: load.served_since(promoted), SERVE_AGAIN_S, "a publish answered after it"
        )
        # The fault's length is the scenario (how long the host stays frozen), not a wait for
        # something to happen; the node keeps serving on the new primary meanwhile.
        await asyncio.sleep(max(0.0, inflicted + fault.lasting_s - time.monotonic()))
        fault.heal(old)
        await asyncio.to_thread(cluster.wait_ready)
        before = len(load.acked)
        try:
            await eventually_value(load.count, lambda n: n > before + 50, what="rejoined")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{cluster.diagnosis()}") from None
    finally:
        load.stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
    stored = await log_of(dsn, A)
    assert sorted(stored) == list(range(1, len(stored) + 1)), "sequence ids with a gap"
    changed = [s for s, raw in load.acked.items() if stored.get(s) != raw]
    assert not changed, (
        f"acknowledged envelopes lost or changed: {changed[:10]} ({len(stored)} stored)\n"
        f"{cluster.diagnosis()}"
    )
    assert node.proc.poll() is None, node.output()[-3000:]
    assert '"database_primary_changed"' in node.output()
    await outages_logged_once(node)
    return load


async def outages_logged_once(node: NodeProcess) -> None:
    """The failover is in the log as outages of the database, each `database_lost` once and
    `database_back` once, not an error per refused request or retry."""
    lost = len(events(node, "database_lost"))

    async def each_back() -> bool:
        return len(events(node, "database_back")) == lost

    assert lost >= 1, "the failover was not logged"
    await eventually(each_back, what=f"database_back for each of {lost} database_lost")
    lines = node.output().splitlines()
    errors = [json.loads(s) for s in lines if s.startswith("{") and '"level": "error"' in s]
    assert {e["event"] for e in errors} == {"database_lost"}, errors[:5]


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


@pytest.fixture(scope="module")
async def shared_isolable() -> AsyncIterator[Isolable]:
    """One cluster for the module's tests: starting etcd and two members costs more than the
    heal each test ends with (`isolable`)."""
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


@pytest.fixture
async def isolable(shared_isolable: Isolable) -> Isolable:
    """The module's cluster with every host back (restarted, resumed, linked: a test that
    failed midway may have left one out) and a primary with a synchronous standby streaming."""
    ha = shared_isolable
    for name, member in ha.cluster.members.items():
        ha.cut(name, False)
        if member.process is None:
            ha.cluster.start_member(name)
        else:
            ha.cluster.signal_member(name, signal.SIGCONT)
    await asyncio.to_thread(ha.cluster.wait_ready)
    return ha


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


async def test_primary_frozen(
    isolable: Isolable, network: Network, spawn_node: Callable[..., NodeProcess]
) -> None:
    """Frozen past the promotion: on waking up the old primary takes writes for a moment, on
    its older timeline, before Patroni demotes it; the node must not write there."""
    node, dsn = await asyncio.to_thread(start_network, network, spawn_node, isolable)
    fault = signalled(isolable.cluster, signal.SIGSTOP, FROZEN_S)
    await fail_over(isolable.cluster, node, dsn, fault)
    await peers_converge(network, dsn)


async def test_primary_cut_off(
    isolable: Isolable, network: Network, spawn_node: Callable[..., NodeProcess]
) -> None:
    node, dsn = await asyncio.to_thread(start_network, network, spawn_node, isolable)
    await fail_over(isolable.cluster, node, dsn, isolable.fault)
    await peers_converge(network, dsn)
