"""A subscription never skips (the rule of etcd's watch and Jepsen's checkers): three `xnode run`
processes (every peer link through a TCP proxy this test controls) and a gateway, publish load
on every node, and subscribers of every kind the nodes serve:
- SubscribeEnvelopes by topics (one cursor), opened before the load and during it (catch-up
  from the store while envelopes commit, then live);
- SubscribeEnvelopes by originators;
- SubscribeTopics with a cursor per topic, on ReplicationApi and on QueryApi;
- the gateway's SubscribeEnvelopes (it fails over between nodes);
- a slow consumer that stops reading until the node ends its stream (it must name where to
  resume), one by topics and one with a cursor per topic.
Faults meanwhile: SIGTERM and restart of node 300, kill -9 and restart of node 100, a partition
of node 200 from the others. Every subscriber resumes on its node (the gateway's, on the
gateway) from the cursor its ending status named, or else from what it received. The checker
(tests/support/subscriber_history.py) then finds every acknowledged envelope of each subscriber's
topics exactly once, in each originator's order: none skipped, none duplicated."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.conftest import REPLICATION_TEST_SETTINGS, NodeProcess, NodeSpec
from tests.support.statuses import trailers
from tests.support.subscriber_history import Call, History, Key, Tops, Verdict, check
from tests.support.tcp_link import Link
from tests.support.waiting import eventually
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xmtp.xmtpv4.message_api import message_api_pb2_grpc, query_api_pb2_grpc
from xnode.api.errors import CURSOR_TRAILER
from xnode.client.node import NodeClient
from xnode.core.crypto import SigningKey
from xnode.core.cursors import Cursor
from xnode.core.envelopes import cursor_from_proto, cursor_to_proto, parse_originator_envelope
from xnode.core.registry import NodeEntry, Registry
from xnode.core.topics import Topic, TopicKind
from xnode.devtools.devgateway import spawn_gateway
from xnode.devtools.devnet import load_key, wait_serving
from xnode.devtools.postgres import PgCluster, free_port

NODES = (100, 200, 300)
PAYER = SigningKey.generate()
GROUPS = [bytes([g]) * 16 for g in range(1, 5)]
TOPICS = [Topic(TopicKind.GROUP_MESSAGES, g).raw for g in GROUPS]
SLOW_GROUP = bytes([9]) * 16  # the slow consumers' topic: large envelopes fill their windows
SLOW_TOPIC = Topic(TopicKind.GROUP_MESSAGES, SLOW_GROUP).raw
SETTINGS = {
    **REPLICATION_TEST_SETTINGS,
    "subscription_max_lag_seconds": 1.0,
    "shutdown_grace_seconds": 2.0,  # SIGTERM: open streams end at once, with a status
}
# The slow reader's flow-control windows stay small (no BDP probing): what it leaves unread
# stalls the node's writes, as a slow client's would.
SLOW_CHANNEL = [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 1024)]
Frames = AsyncIterator[list[envelopes_pb2.OriginatorEnvelope]]


@dataclass
class Net:
    tmp: Path
    spec: NodeSpec
    dsns: dict[int, str]
    addresses: dict[int, str]
    spawn: Callable[..., NodeProcess]
    links: dict[tuple[int, int], Link] = field(default_factory=dict)
    processes: dict[int, NodeProcess] = field(default_factory=dict)

    def start(self, node_id: int) -> None:
        env = {k: str(v) for k, v in SETTINGS.items()}
        self.processes[node_id] = self.spawn(
            self.dsns[node_id],
            self.spec,
            node_id,
            wait=False,
            listen_address=self.addresses[node_id],
            nodes_file=str(self.tmp / f"nodes-{node_id}.json"),
            **env,
        )

    async def serving(self, *node_ids: int) -> None:
        for n in node_ids:
            if not await asyncio.to_thread(wait_serving, self.addresses[n], 120):
                pytest.fail(f"node {n} did not start:\n{self.processes[n].output()[-3000:]}")

    def cut(self, node_id: int, cut: bool) -> None:
        for (a, b), link in self.links.items():
            if node_id in (a, b):
                link.set_cut(cut)


@dataclass
class Subscriber:
    """A history and how to open one call from a cursor per topic."""

    history: History
    open: Callable[[dict[bytes, Tops]], Frames]
    stall: asyncio.Event | None = None  # set: stops reading until cleared
    start: dict[bytes, Tops] = field(default_factory=dict)  # the first call's cursors


def _topics_request(start: dict[bytes, Tops]) -> api.SubscribeTopicsRequest:
    return api.SubscribeTopicsRequest(
        filters=[
            api.SubscribeTopicsRequest.TopicFilter(topic=t, last_seen=cursor_to_proto(Cursor(c)))
            for t, c in start.items()
        ]
    )


def _one_cursor(start: dict[bytes, Tops]) -> Cursor:
    merged: Tops = {}
    for cursor in start.values():
        for o, s in cursor.items():
            merged[o] = max(merged.get(o, 0), s)
    return Cursor(merged)


def by_topics(channel: grpc.aio.Channel) -> Callable[[dict[bytes, Tops]], Frames]:
    stub = message_api_pb2_grpc.ReplicationApiStub(channel)

    async def frames(start: dict[bytes, Tops]) -> Frames:
        query = api.EnvelopesQuery(
            topics=list(start), last_seen=cursor_to_proto(_one_cursor(start))
        )
        async for response in stub.SubscribeEnvelopes(api.SubscribeEnvelopesRequest(query=query)):
            yield list(response.envelopes)

    return frames


def by_originators(channel: grpc.aio.Channel) -> Callable[[dict[bytes, Tops]], Frames]:
    stub = message_api_pb2_grpc.ReplicationApiStub(channel)

    async def frames(start: dict[bytes, Tops]) -> Frames:
        query = api.EnvelopesQuery(
            originator_node_ids=list(NODES), last_seen=cursor_to_proto(_one_cursor(start))
        )
        async for response in stub.SubscribeEnvelopes(api.SubscribeEnvelopesRequest(query=query)):
            yield list(response.envelopes)

    return frames


def per_topic(channel: grpc.aio.Channel, query_api: bool) -> Callable[[dict[bytes, Tops]], Frames]:
    stub: Any = (
        query_api_pb2_grpc.QueryApiStub(channel)
        if query_api
        else message_api_pb2_grpc.ReplicationApiStub(channel)
    )

    async def frames(start: dict[bytes, Tops]) -> Frames:
        async for response in stub.SubscribeTopics(_topics_request(start)):
            if response.WhichOneof("response") == "envelopes":
                yield list(response.envelopes.envelopes)

    return frames


def _resume_of(exc: grpc.aio.AioRpcError, topics: frozenset[bytes]) -> dict[bytes, Tops] | None:
    value = trailers(exc).get(CURSOR_TRAILER)
    if not isinstance(value, bytes):
        return None
    cursor = cursor_from_proto(envelopes_pb2.Cursor.FromString(value), "trailer").to_dict()
    return {t: {o: s for o, s in cursor.items() if s} for t in topics}


async def follow(subscriber: Subscriber, stop: asyncio.Event) -> None:
    """Reads; when the call ends, records how and resumes from the cursor its status named,
    or else from what arrived."""
    history = subscriber.history
    while not stop.is_set():
        call: Call = history.open(history.position() if history.calls else subscriber.start)
        resume = None
        try:
            async for frame in subscriber.open(call.start):
                for envelope in frame:
                    got = parse_originator_envelope(envelope.SerializeToString())
                    call.receive(got.topic(), got.originator_node_id, got.sequence_id)
                while subscriber.stall is not None and subscriber.stall.is_set():
                    await asyncio.sleep(0.05)
            call.end("OK (ended without a status)")
        except grpc.aio.AioRpcError as exc:
            resume = _resume_of(exc, history.topics)
            call.end(exc.code().name, resume)
        await asyncio.sleep(0.2)


async def publish_load(
    clients: dict[int, NodeClient], acked: dict[Key, bytes], stop: asyncio.Event
) -> None:
    """Small batches to every node in turn, each envelope unique; what a node acknowledged is
    kept (a node down answers nothing, and the batch is not retried)."""
    i = 0
    while not stop.is_set():
        for node_id, client in clients.items():
            group = GROUPS[i % len(GROUPS)]
            payloads = [b"load-%d-%d" % (node_id, i + k) for k in range(3)]
            i += 3
            with contextlib.suppress(grpc.aio.AioRpcError):
                sent = await client.publish_group_messages(PAYER, node_id, group, payloads)
                for envelope in sent:
                    got = parse_originator_envelope(envelope.SerializeToString())
                    acked[(got.originator_node_id, got.sequence_id)] = Topic(
                        TopicKind.GROUP_MESSAGES, group
                    ).raw
        await asyncio.sleep(0.1)


async def stall_until_ended(
    net: Net,
    node_id: int,
    client: NodeClient,
    stalled: list[Subscriber],
    acked: dict[Key, bytes],
) -> None:
    """Stops the slow readers, publishes large envelopes on their topic until their node
    reports each ended, then lets them read again."""
    for subscriber in stalled:
        assert subscriber.stall is not None
        subscriber.stall.set()
    big = b"x" * 200_000
    log = net.processes[node_id]

    async def ended() -> bool:
        sent = await client.publish_group_messages(
            PAYER, node_id, SLOW_GROUP, [uuid.uuid4().bytes + big]
        )
        got = parse_originator_envelope(sent[0].SerializeToString())
        acked[(got.originator_node_id, got.sequence_id)] = SLOW_TOPIC
        return log.output().count('"event": "subscription_fell_behind"') >= len(stalled)

    await eventually(ended, within_s=30, what="the slow readers' streams ended")
    for subscriber in stalled:
        assert subscriber.stall is not None
        subscriber.stall.clear()


async def all_caught_up(subscribers: list[Subscriber], acked: dict[Key, bytes]) -> bool:
    verdict = check([s.history for s in subscribers], acked)
    return verdict.ok and verdict.left_to_resume == 0


async def _network(
    pg_cluster: PgCluster, spawn_node: Callable[..., NodeProcess], tmp_path: Path
) -> Net:
    spec = NodeSpec(tmp_path, {n: SigningKey.generate() for n in NODES})
    addresses = {n: f"127.0.0.1:{free_port()}" for n in NODES}
    spec.write(addresses)  # direct: the gateway's registry
    net = Net(tmp_path, spec, {}, addresses, spawn_node)
    for a in NODES:
        for b in NODES:
            if a != b:
                link = Link()
                await link.start()
                link.upstream = addresses[b]
                net.links[(a, b)] = link
        entries = [
            NodeEntry(
                b,
                spec.keys[b].public_key,
                f"http://{addresses[b] if a == b else net.links[(a, b)].address}",
            )
            for b in NODES
        ]
        (tmp_path / f"nodes-{a}.json").write_text(Registry(entries).to_json())
        name = f"s_{uuid.uuid4().hex[:10]}"
        pg_cluster.create_database(name)
        net.dsns[a] = pg_cluster.dsn(name)
    for n in NODES:
        net.start(n)
    await net.serving(*NODES)
    return net


async def test_every_subscriber_sees_every_acknowledged_envelope_once_through_faults(
    pg_cluster: PgCluster, spawn_node: Callable[..., NodeProcess], tmp_path: Path
) -> None:
    net = await _network(pg_cluster, spawn_node, tmp_path)
    gateway_address = f"127.0.0.1:{free_port()}"
    key_file = tmp_path / "gateway.key"
    load_key(key_file)
    registry_env = {"XNODE_REGISTRY_SOURCE": "file", "XNODE_NODES_FILE": str(net.spec.nodes_file)}
    gateway = spawn_gateway(tmp_path, gateway_address, key_file, registry_env)
    channels: list[grpc.aio.Channel] = []

    def channel(address: str, options: list[tuple[str, Any]] | None = None) -> grpc.aio.Channel:
        opened = grpc.aio.insecure_channel(address, options=options)
        channels.append(opened)
        return opened

    all_topics = frozenset(TOPICS)
    subscribers: list[Subscriber] = []

    def subscriber(
        name: str,
        frames: Callable[[dict[bytes, Tops]], Frames],
        topics: frozenset[bytes] = all_topics,
        per: bool = False,
        slow: bool = False,
    ) -> Subscriber:
        made = Subscriber(History(name, topics, per), frames, asyncio.Event() if slow else None)
        subscribers.append(made)
        return made

    stop, stop_load = asyncio.Event(), asyncio.Event()
    acked: dict[Key, bytes] = {}
    clients = {n: NodeClient(net.addresses[n]) for n in NODES}
    tasks: list[asyncio.Task[None]] = []
    try:
        assert await asyncio.to_thread(wait_serving, gateway_address, 120), "gateway"
        early = [  # open before any publish: catch-up of nothing, then live
            subscriber("topics@100", by_topics(channel(net.addresses[100]))),
            subscriber("per-topic@300", per_topic(channel(net.addresses[300]), False), per=True),
            subscriber("gateway", by_topics(channel(gateway_address))),
        ]
        tasks += [asyncio.create_task(follow(s, stop)) for s in early]
        tasks.append(asyncio.create_task(publish_load(clients, acked, stop_load)))
        await eventually(lambda: len(acked) >= 60, what="some load acknowledged")
        late = [  # open under load: catch-up from the store while envelopes commit
            subscriber("topics@200", by_topics(channel(net.addresses[200]))),
            subscriber(
                "originators@300",
                by_originators(channel(net.addresses[300])),
                all_topics | {SLOW_TOPIC},  # every envelope of the originators
            ),
            subscriber("query-api@100", per_topic(channel(net.addresses[100]), True), per=True),
        ]
        # It starts from cursors of its own, topic by topic, where the load already was.
        late[2].start = {TOPICS[0]: {100: 3}, TOPICS[1]: {200: 4, 300: 2}}
        slow_topics = frozenset({SLOW_TOPIC})
        slow = [
            subscriber(
                "slow@200",
                by_topics(channel(net.addresses[200], SLOW_CHANNEL)),
                slow_topics,
                slow=True,
            ),
            subscriber(
                "slow-per-topic@200",
                per_topic(channel(net.addresses[200], SLOW_CHANNEL), True),
                frozenset({SLOW_TOPIC, TOPICS[0]}),
                per=True,
                slow=True,
            ),
        ]
        tasks += [asyncio.create_task(follow(s, stop)) for s in late + slow]

        async def serves_all() -> bool:
            return all(len(s.history.calls) >= 1 for s in subscribers)

        await eventually(serves_all, what="every subscriber opened")

        net.processes[300].terminate()  # SIGTERM: drains, ends its streams with a status
        net.processes[100].kill()  # SIGKILL: streams break without a status
        net.start(300)
        net.start(100)
        await net.serving(300, 100)
        net.cut(200, True)  # partition: 200 alone
        await asyncio.sleep(3)  # the load goes on on both sides meanwhile
        net.cut(200, False)
        await stall_until_ended(net, 200, clients[200], slow, acked)
        stop_load.set()

        async def caught_up() -> bool:
            return await all_caught_up(subscribers, acked)

        with contextlib.suppress(AssertionError):  # the checker says what is wrong, below
            await eventually(caught_up, within_s=60, what="every subscriber caught up")
    finally:
        stop.set()
        stop_load.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for opened in channels:
            await opened.close(None)
        for client in clients.values():
            await client.close()
        gateway.kill()
        gateway.wait(30)
        for link in net.links.values():
            await link.stop()

    verdict: Verdict = check([s.history for s in subscribers], acked)
    print(f"subscription checker: {len(acked)} acknowledged; {verdict.summary()}")
    assert verdict.skipped == [] and verdict.duplicated == []
    assert verdict.out_of_order == [] and verdict.foreign == [] and verdict.bad_resumes == []
    assert verdict.left_to_resume == 0, "some subscriber is still short of envelopes"
    # The faults reached the subscribers: streams ended with statuses, and the slow readers'
    # by the node, naming where to resume.
    assert verdict.ended_with_status["UNAVAILABLE"] >= 4, verdict.ended_with_status
    assert any(c.resume is not None for c in slow[0].history.calls), "slow@200 told its cursor"
