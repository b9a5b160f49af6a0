"""Reads through the gateway (gateway/reads.py) in front of in-process nodes: GetNodes names
the gateway, reads fail over from a stopped, a frozen or a lying node, a stream resumes on
another node (or gateway) from its cursor with nothing lost or repeated, bad requests are
refused; and what the health checks change for publishes: a publish or a wait for a chain
payload leaves a node that freezes."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2
from prometheus_client import REGISTRY

from tests.conftest import Network
from tests.integration.gateway.test_gateway import group_id, order_for, start_all
from tests.support.fake_peer import serve_replication_methods
from tests.support.waiting import eventually
from tests.unit.gateway.test_visibility import envelope as chain_envelope
from xmtp.identity.associations import signature_pb2
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xmtp.xmtpv4.message_api import message_api_pb2_grpc
from xnode.client.node import NodeClient, group_message_envelope
from xnode.core.crypto import SigningKey, originator_digest
from xnode.core.envelopes import parse_originator_envelope
from xnode.core.registry import Registry
from xnode.core.topics import Topic, TopicKind
from xnode.gateway.channels import NodeChannels
from xnode.gateway.node_health import NodeHealth
from xnode.gateway.visibility import wait_visible
from xnode.usecases.registry_source import WatchedRegistry

SERVING: bytes = health_pb2.HealthCheckResponse(
    status=health_pb2.HealthCheckResponse.SERVING
).SerializeToString()


def health_until(frozen: asyncio.Event) -> Callable[[bytes, Any], Awaitable[bytes]]:
    """A fake node's health check: SERVING, until `frozen` is set; then it never answers."""

    async def health(request: bytes, context: Any) -> bytes:
        if frozen.is_set():
            await asyncio.Event().wait()
        return SERVING

    return health


async def freezing_node(
    network: Network,
    service: str,
    method: str,
    answer: Callable[[bytes, Any], Awaitable[bytes]],
    frozen: asyncio.Event,
) -> grpc.aio.Server:
    """Node 300 as a fake answering one method of a message_api service, healthy until
    `frozen` is set."""
    unary = grpc.unary_unary_rpc_method_handler(
        answer, request_deserializer=bytes, response_serializer=bytes
    )
    return await serve_replication_methods(
        {method: unary},
        network.addresses[300],
        health=health_until(frozen),
        service=f"xmtp.xmtpv4.message_api.{service}",
    )


async def node_answering(
    network: Network, answer: Callable[[bytes, Any], Awaitable[bytes]]
) -> grpc.aio.Server:
    """Node 300 as a fake whose QueryEnvelopes and health checks both run `answer`."""
    unary = grpc.unary_unary_rpc_method_handler(
        answer, request_deserializer=bytes, response_serializer=bytes
    )
    return await serve_replication_methods(
        {"QueryEnvelopes": unary}, network.addresses[300], health=answer
    )


def failovers(method: str, node: int, cause: str) -> float:
    labels = {"method": method, "node": str(node), "cause": cause}
    return REGISTRY.get_sample_value("xnode_gateway_read_failovers_total", labels) or 0.0


def topic_preferring(network: Network, node_id: int) -> tuple[bytes, bytes]:
    """A group id whose topic's preferred node (XIP-49 3.3.6) is `node_id`, and the topic."""
    for i in range(1000):
        topic = Topic(TopicKind.GROUP_MESSAGES, group_id(i)).raw
        if order_for(network, topic)[0] == node_id:
            return group_id(i), topic
    raise AssertionError(f"no topic prefers node {node_id}")


def reads_stub(gateway: Any) -> Any:
    return message_api_pb2_grpc.ReplicationApiStub(gateway.channel)


def query(topic: bytes) -> api.QueryEnvelopesRequest:
    return api.QueryEnvelopesRequest(query=api.EnvelopesQuery(topics=[topic]))


def forged(raw: bytes) -> bytes:
    """The same envelope, signed by a key that is not its originator's."""
    envelope = envelopes_pb2.OriginatorEnvelope.FromString(raw)
    signature = SigningKey.generate().sign(originator_digest(envelope.unsigned_originator_envelope))
    return envelopes_pb2.OriginatorEnvelope(
        unsigned_originator_envelope=envelope.unsigned_originator_envelope,
        originator_signature=signature_pb2.RecoverableEcdsaSignature(bytes=signature),
    ).SerializeToString()


async def test_get_nodes_names_the_gateway_for_reads(network: Network, gateway_for: Any) -> None:
    gateway = await gateway_for()
    assert await gateway.nodes() == {0: f"http://{gateway.gateway.address}"}
    behind = await gateway_for(read_url="https://gateways.example:443")
    assert await behind.nodes() == {0: "https://gateways.example:443"}
    direct = await gateway_for(reads_through_gateway=False)
    assert await direct.nodes() == {n: f"http://{a}" for n, a in network.addresses.items()}


async def test_a_query_is_answered_by_the_next_node_when_the_preferred_one_is_stopped(
    start_node: Any, network: Network, gateway_for: Any
) -> None:
    nodes = await start_all(start_node, network)
    gateway = await gateway_for()
    group, topic = topic_preferring(network, 100)
    published = await gateway.publish([group_message_envelope(group, b"a")])
    stub = reads_stub(gateway)
    first = await stub.QueryEnvelopes(query(topic), timeout=10)
    assert [e.SerializeToString() for e in first.envelopes] == [
        p.SerializeToString() for p in published
    ]

    async def replicated() -> bool:
        async with NodeClient(network.addresses[order_for(network, topic)[1]]) as client:
            return len(await client.query([topic])) == 1

    await eventually(replicated, 15)
    await nodes[100].stop()
    again = await stub.QueryEnvelopes(query(topic), timeout=10)
    assert list(again.envelopes) == list(first.envelopes)
    newest = await stub.GetNewestEnvelope(api.GetNewestEnvelopeRequest(topics=[topic]), timeout=10)
    assert [r.originator_envelope for r in newest.results] == list(first.envelopes)


async def test_a_frozen_node_is_left_within_a_health_check(
    start_node: Any, network: Network, gateway_for: Any
) -> None:
    """Node 300's address answers nothing at all, like a SIGSTOPped process: the query that
    went there first is cut when the health check fails, and another node answers."""
    await start_node(**network.settings(100))
    await start_node(**network.settings(200))
    never = asyncio.Event()

    async def hang(request: bytes, context: Any) -> bytes:
        await never.wait()
        return b""

    frozen = await node_answering(network, hang)
    try:
        gateway = await gateway_for(
            node_check_seconds=0.2,
            node_check_timeout_seconds=1.0,
            node_check_connect_timeout_seconds=1.0,  # frozen before the first check
        )
        _, topic = topic_preferring(network, 300)
        before = failovers("QueryEnvelopes", 300, "health_check")
        started = time.monotonic()
        answer = await reads_stub(gateway).QueryEnvelopes(query(topic), timeout=25)
        assert list(answer.envelopes) == []
        # Two missed checks (about 2.4 s), not the 30 s read timeout, even on a loaded host.
        assert time.monotonic() - started < 15.0
        assert failovers("QueryEnvelopes", 300, "health_check") == before + 1
    finally:
        never.set()
        await frozen.stop(None)


async def test_a_publish_to_a_node_that_freezes_goes_to_the_next_one(
    start_node: Any, network: Network, gateway_for: Any
) -> None:
    """Node 300 takes the publish and freezes: once it fails its health check the publish
    is sent to the next preferred node instead of waiting out the freeze."""
    await start_node(**network.settings(100))
    await start_node(**network.settings(200))
    frozen, taken = asyncio.Event(), asyncio.Event()

    async def take(request: bytes, context: Any) -> bytes:
        taken.set()
        await asyncio.Event().wait()
        return b""

    node = await freezing_node(network, "PublishApi", "PublishPayerEnvelopes", take, frozen)
    try:
        gateway = await gateway_for(
            node_check_seconds=0.2, node_check_timeout_seconds=1.0, publish_timeout_seconds=30.0
        )
        group, topic = topic_preferring(network, 300)
        publish = asyncio.create_task(gateway.publish([group_message_envelope(group, b"x")]))
        await asyncio.wait_for(taken.wait(), 10)
        frozen.set()
        started = time.monotonic()
        (answer,) = await asyncio.wait_for(publish, 40)
        # Two missed checks (about 2.4 s), not the 30 s publish timeout, on a loaded host too.
        assert time.monotonic() - started < 15.0
        got = parse_originator_envelope(answer.SerializeToString())
        assert got.originator_node_id == order_for(network, topic)[1]
    finally:
        await node.stop(None)


async def test_a_forged_answer_is_not_passed_on(
    start_node: Any, network: Network, gateway_for: Any
) -> None:
    """Node 300's address serves node 100's envelopes re-signed by another key: the gateway
    checks them against the registry, refuses them and answers from a node that does not lie."""
    await start_node(**network.settings(100))
    await start_node(**network.settings(200))
    asked: list[bytes] = []

    async def lie(request: bytes, context: Any) -> bytes:
        asked.append(request)
        async with NodeClient(network.addresses[100]) as honest:
            found = await honest.query(
                list(api.QueryEnvelopesRequest.FromString(request).query.topics)
            )
        return api.QueryEnvelopesResponse(
            envelopes=[
                envelopes_pb2.OriginatorEnvelope.FromString(forged(e.SerializeToString()))
                for e in found
            ]
        ).SerializeToString()

    async def serving(request: bytes, context: Any) -> bytes:
        return SERVING

    unary = grpc.unary_unary_rpc_method_handler(
        lie, request_deserializer=bytes, response_serializer=bytes
    )
    liar = await serve_replication_methods(
        {"QueryEnvelopes": unary}, network.addresses[300], health=serving
    )
    try:
        gateway = await gateway_for()
        group, topic = topic_preferring(network, 300)
        async with NodeClient(network.addresses[100]) as honest:
            (stored,) = await honest.publish_group_messages(
                gateway.payer, 100, group, [b"the truth"]
            )
        before = failovers("QueryEnvelopes", 300, "check_failed")
        answer = await reads_stub(gateway).QueryEnvelopes(query(topic), timeout=10)
        assert asked, "the lying node was never asked: the test proves nothing"
        assert failovers("QueryEnvelopes", 300, "check_failed") == before + 1
        assert [e.SerializeToString() for e in answer.envelopes] == [stored.SerializeToString()]
    finally:
        await liar.stop(None)


async def test_a_stream_resumes_on_another_node_with_nothing_lost_or_repeated(
    start_node: Any, network: Network, gateway_for: Any
) -> None:
    nodes = await start_all(start_node, network)
    gateway = await gateway_for()
    group, topic = topic_preferring(network, 100)
    stream = reads_stub(gateway).SubscribeEnvelopes(
        api.SubscribeEnvelopesRequest(query=api.EnvelopesQuery(topics=[topic]))
    )
    received: list[bytes] = []

    async def read() -> None:
        async for response in stream:
            received.extend(e.SerializeToString() for e in response.envelopes)

    reader = asyncio.create_task(read())
    try:
        before = await gateway.publish([group_message_envelope(group, b"%d" % i) for i in range(5)])
        await eventually(lambda: len(received) >= 5, 15, "five envelopes streamed")
        await nodes[100].stop()
        after = await gateway.publish(
            [group_message_envelope(group, b"after %d" % i) for i in range(5)]
        )
        assert {
            parse_originator_envelope(a.SerializeToString()).originator_node_id for a in after
        } == {order_for(network, topic)[1]}
        await eventually(lambda: len(received) >= 10, 15, "ten envelopes streamed")
        assert received == [e.SerializeToString() for e in before + after]
    finally:
        stream.cancel()
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)


async def test_bad_requests_get_a_precise_status(
    start_node: Any, network: Network, gateway_for: Any
) -> None:
    await start_all(start_node, network)
    gateway = await gateway_for()
    call = gateway.channel.unary_unary("/xmtp.xmtpv4.message_api.QueryApi/QueryEnvelopes")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call(b"\xff\xff", timeout=10)
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "does not decode as xmtp.xmtpv4.message_api.QueryEnvelopesRequest" in (
        err.value.details() or ""
    )
    too_many = api.QueryEnvelopesRequest(
        query=api.EnvelopesQuery(
            topics=[Topic(TopicKind.GROUP_MESSAGES, group_id(i)).raw for i in range(2000)]
        )
    )
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await reads_stub(gateway).QueryEnvelopes(too_many, timeout=10)
    # The node's own refusal, with its words: every node would refuse it alike.
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT, err.value


async def test_a_stream_resumes_on_another_gateway_from_the_clients_cursor(
    start_node: Any, network: Network, gateway_for: Any
) -> None:
    """Two gateways behind one address hold nothing a client needs: a stream on the first,
    which then stops, goes on through the second from the cursor the client saw."""
    await start_all(start_node, network)
    first = await gateway_for(read_url="http://gateways.example:5040")
    second = await gateway_for(read_url="http://gateways.example:5040")
    group, topic = topic_preferring(network, 200)
    published = await first.publish([group_message_envelope(group, b"%d" % i) for i in range(3)])
    request = api.SubscribeEnvelopesRequest(query=api.EnvelopesQuery(topics=[topic]))
    received: list[bytes] = []
    stream = reads_stub(first).SubscribeEnvelopes(request)
    async for response in stream:
        received.extend(e.SerializeToString() for e in response.envelopes)
        if len(received) >= 3:
            break
    stream.cancel()
    await first.gateway.stop()
    published += await second.publish(
        [group_message_envelope(group, b"%d" % i) for i in range(3, 6)]
    )
    seen = parse_originator_envelope(received[-1])
    request.query.last_seen.node_id_to_sequence_id[seen.originator_node_id] = seen.sequence_id
    resumed = reads_stub(second).SubscribeEnvelopes(request)
    async for response in resumed:
        received.extend(e.SerializeToString() for e in response.envelopes)
        if len(received) >= 6:
            break
    resumed.cancel()
    assert received == [p.SerializeToString() for p in published]


async def test_a_stopping_gateway_ends_its_streams_unavailable_at_once(
    start_node: Any, network: Network, gateway_for: Any
) -> None:
    await start_all(start_node, network)
    gateway = await gateway_for(shutdown_grace_seconds=20.0)
    group, topic = topic_preferring(network, 100)
    await gateway.publish([group_message_envelope(group, b"x")])
    stream = reads_stub(gateway).SubscribeEnvelopes(
        api.SubscribeEnvelopesRequest(query=api.EnvelopesQuery(topics=[topic]))
    )
    first = await stream.read()
    assert len(first.envelopes) == 1
    started = time.monotonic()
    stopping = asyncio.create_task(gateway.gateway.stop())
    with pytest.raises(grpc.aio.AioRpcError) as err:
        while isinstance(await stream.read(), api.SubscribeEnvelopesResponse):
            pass  # envelopes, until the stream ends
        raise AssertionError("the stream ended OK: the client would not resubscribe")
    assert err.value.code() is grpc.StatusCode.UNAVAILABLE
    assert "resubscribe from your cursor" in (err.value.details() or "")
    await stopping
    assert time.monotonic() - started < 10.0  # not the 20 s grace


async def test_the_wait_for_a_chain_payload_leaves_a_node_that_freezes(network: Network) -> None:
    """Node 300 has not indexed the payload yet, then freezes: the gateway stops waiting for
    it once it fails its health check, not at chain_visibility_seconds."""
    frozen, asked = asyncio.Event(), asyncio.Event()

    async def behind(request: bytes, context: Any) -> bytes:
        asked.set()
        if frozen.is_set():
            await asyncio.Event().wait()
        return b""  # an empty QueryEnvelopesResponse: not indexed yet

    node = await freezing_node(network, "QueryApi", "QueryEnvelopes", behind, frozen)
    entry = Registry.from_json(network.spec.nodes_file.read_text()).nodes[300]
    channels = NodeChannels(1 << 20, 5.0)
    # Down at its first missed check: this is about the wait, not about when a node is down.
    checks = NodeHealth(WatchedRegistry(Registry([entry])), channels, 0.2, 1.0, failures_to_down=1)
    checks.start()
    try:
        answers = [chain_envelope(1, 4, chain=True)]
        waiting = asyncio.create_task(
            wait_visible(channels, checks, [entry], answers, 30.0, "127.0.0.1")
        )
        await asyncio.wait_for(asked.wait(), 10)
        frozen.set()
        started = time.monotonic()
        await asyncio.wait_for(waiting, 40)
        assert time.monotonic() - started < 15.0  # a missed check, not the 30 s wait
    finally:
        await checks.stop()
        await channels.close()
        await node.stop(None)


def connections_to(address: str) -> int:
    """Established TCP connections to `address` from this host (ss, iproute2)."""
    port = address.rsplit(":", 1)[1]
    listed = subprocess.run(
        ["ss", "-Htn", "state", "established", f"( dport = :{port} )"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return len(listed.splitlines())


async def test_streams_to_a_node_are_spread_over_several_connections(
    start_node: Any, network: Network, gateway_for: Any
) -> None:
    """A node's worker processes divide connections between them, not streams: the streams
    a gateway carries for its clients go over `stream_connections_per_node` connections."""
    await start_node(**network.settings(100))
    gateway = await gateway_for(stream_connections_per_node=4)
    _, topic = topic_preferring(network, 100)
    request = api.SubscribeEnvelopesRequest(query=api.EnvelopesQuery(topics=[topic]))
    streams = [reads_stub(gateway).SubscribeEnvelopes(request) for _ in range(8)]
    try:
        for stream in streams:
            await asyncio.wait_for(stream.read(), 15)  # caught up: open on node 100
        # The gateway's calls and health checks on one, its streams on four more.
        assert connections_to(network.addresses[100]) == 5
    finally:
        for stream in streams:
            stream.cancel()
