"""The gateway (PayerApi) in front of in-process nodes: GetNodes, routing to the preferred
node, request order, exact client bytes, node refusals passed on, failover, bad input."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from grpc_health.v1 import health_pb2

from tests.conftest import Network
from tests.support.statuses import trailers
from tests.support.waiting import eventually
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.payer_api import payer_api_pb2 as payer_api
from xnode.api.errors import CURSOR_TRAILER
from xnode.client.grpc_services import health_check
from xnode.client.node import NodeClient, group_message_envelope, key_package_envelope
from xnode.core import wire
from xnode.core.cursors import Cursor
from xnode.core.envelopes import parse_originator_envelope
from xnode.core.originator_selection import available_nodes, failover_order
from xnode.core.registry import Registry

INVALID = grpc.StatusCode.INVALID_ARGUMENT


def group_id(i: int) -> bytes:
    return i.to_bytes(16, "big")


def order_for(network: Network, topic: bytes) -> list[int]:
    registry = Registry.from_json(network.spec.nodes_file.read_text())
    return failover_order(topic, available_nodes(registry))


def key_package(installation: bytes) -> envelopes_pb2.ClientEnvelope:
    """A key package on `installation`'s topic, signed with it (an Ed25519 seed)."""
    return key_package_envelope(installation, int(time.time()) - 60)


async def start_all(start_node: Any, network: Network) -> dict[int, Any]:
    return {n: await start_node(**network.settings(n)) for n in (100, 200, 300)}


async def stored_count(address: str, originator: int) -> int:
    async with NodeClient(address) as client:
        return len(await client.query(originators=[originator], limit=1000))


async def test_get_nodes_lists_enabled_nodes_with_their_urls(
    network: Network, gateway_for: Any
) -> None:
    gateway = await gateway_for(reads_through_gateway=False)
    assert await gateway.nodes() == {n: f"http://{a}" for n, a in network.addresses.items()}
    network.set_enabled(200, False)

    async def dropped() -> bool:
        return 200 not in await gateway.nodes()

    await eventually(dropped, 15, "the gateway dropping a disabled node")
    assert sorted(await gateway.nodes()) == [100, 300]


async def test_health_is_serving(gateway_for: Any) -> None:
    gateway = await gateway_for()
    stub = health_check(gateway.channel)
    for service in ("", "xmtp.xmtpv4.payer_api.PayerApi"):
        reply = await stub(health_pb2.HealthCheckRequest(service=service))
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_each_envelope_goes_to_its_topics_preferred_node_in_request_order(
    start_node: Any, network: Network, gateway_for: Any
) -> None:
    await start_all(start_node, network)
    gateway = await gateway_for()
    sent = [group_message_envelope(group_id(i % 5), f"m{i}".encode()) for i in range(12)]
    sent.append(key_package(bytes(range(32))))
    answers = await gateway.publish(sent)
    assert len(answers) == len(sent)
    for client, answer in zip(sent, answers, strict=True):
        got = parse_originator_envelope(answer.SerializeToString())
        payer = got.payer_envelope
        # The client's bytes, signed by the gateway for the node that originated them.
        assert payer.unsigned_client_envelope == client.SerializeToString()
        assert got.originator_node_id == order_for(network, client.aad.target_topic)[0]
        assert payer.target_originator == got.originator_node_id
    # Per topic, sequence ids follow the request's order.
    for i in range(5):
        seqs = [
            parse_originator_envelope(a.SerializeToString()).sequence_id
            for c, a in zip(sent, answers, strict=True)
            if c.aad.target_topic == b"\x00" + group_id(i)
        ]
        assert seqs == sorted(seqs)


async def test_a_large_batch_keeps_request_order_across_nodes(
    start_node: Any, network: Network, gateway_for: Any
) -> None:
    await start_all(start_node, network)
    gateway = await gateway_for()
    sent = [group_message_envelope(group_id(i % 40), f"m{i}".encode()) for i in range(400)]
    answers = await gateway.publish(sent)
    got = [parse_originator_envelope(a.SerializeToString()) for a in answers]
    assert [g.payer_envelope.unsigned_client_envelope for g in got] == [
        c.SerializeToString() for c in sent
    ]
    assert {g.originator_node_id for g in got} == {100, 200, 300}


async def test_the_payer_is_the_gateway(
    start_node: Any, network: Network, gateway_for: Any
) -> None:
    await start_all(start_node, network)
    gateway = await gateway_for(message_retention_days=7)
    (answer,) = await gateway.publish([group_message_envelope(group_id(1), b"x")])
    from xnode.core.crypto import address_of, payer_digest, recover_public_key

    payer = parse_originator_envelope(answer.SerializeToString()).payer_envelope
    digest = payer_digest(payer.target_originator, payer.unsigned_client_envelope)
    assert address_of(recover_public_key(payer.payer_signature.bytes, digest)) == (
        gateway.payer.address
    )
    assert payer.message_retention_days == 7


async def test_a_pinned_target_originator_is_honoured(
    start_node: Any, network: Network, gateway_for: Any
) -> None:
    await start_all(start_node, network)
    gateway = await gateway_for()
    topic = b"\x00" + group_id(3)
    pinned = order_for(network, topic)[-1]  # not the preferred node
    client = group_message_envelope(group_id(3), b"x")
    client.aad.target_originator = pinned
    (answer,) = await gateway.publish([client])
    assert parse_originator_envelope(answer.SerializeToString()).originator_node_id == pinned


async def test_failover_to_the_next_preferred_node_when_one_is_down(
    start_node: Any, network: Network, gateway_for: Any
) -> None:
    nodes = await start_all(start_node, network)
    gateway = await gateway_for()
    topic = b"\x00" + group_id(7)
    first, second, _ = order_for(network, topic)
    await nodes[first].stop()
    answers = await gateway.publish(
        [group_message_envelope(group_id(7), b"a"), group_message_envelope(group_id(7), b"b")]
    )
    got = [parse_originator_envelope(a.SerializeToString()) for a in answers]
    assert [g.originator_node_id for g in got] == [second, second]
    assert [g.payer_envelope.target_originator for g in got] == [second, second]
    assert got[0].sequence_id < got[1].sequence_id


async def test_unavailable_only_when_no_node_can_take_it(
    start_node: Any, network: Network, gateway_for: Any
) -> None:
    nodes = await start_all(start_node, network)
    gateway = await gateway_for()
    for node in nodes.values():
        await node.stop()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await gateway.publish([group_message_envelope(group_id(1), b"x")])
    assert err.value.code() is grpc.StatusCode.UNAVAILABLE
    assert "no node could take it" in (err.value.details() or "")
    assert "retry later" in (err.value.details() or "")


async def test_a_node_refusal_keeps_its_status_message_and_cursor_with_the_clients_index(
    start_node: Any, network: Network, gateway_for: Any
) -> None:
    await start_all(start_node, network)
    gateway = await gateway_for()
    topic = b"\x00" + group_id(2)
    preferred = order_for(network, topic)[0]
    ok = group_message_envelope(group_id(2), b"fine")
    ahead = group_message_envelope(group_id(2), b"later", Cursor({preferred: 999}))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await gateway.publish([ok, ahead])
    assert err.value.code() is grpc.StatusCode.ABORTED  # the node's status (XIP 409)
    details = err.value.details() or ""
    assert details.startswith("envelopes[1]: depends_on is ahead of this node"), details
    assert f"(node {preferred})" in details
    assert CURSOR_TRAILER in trailers(err.value)


async def test_runs_stop_at_the_first_refusal_and_say_what_was_published(
    start_node: Any, network: Network, gateway_for: Any
) -> None:
    nodes = await start_all(start_node, network)
    gateway = await gateway_for()
    # Two groups on different preferred nodes: the second run is refused by its node.
    a, b = next(
        (x, y)
        for x in range(50)
        for y in range(50)
        if order_for(network, b"\x00" + group_id(x))[0]
        != order_for(network, b"\x00" + group_id(y))[0]
    )
    node_b = order_for(network, b"\x00" + group_id(b))[0]
    first = group_message_envelope(group_id(a), b"stored")
    refused = group_message_envelope(group_id(b), b"x", Cursor({node_b: 999}))
    never = group_message_envelope(group_id(a), b"never sent")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await gateway.publish([first, refused, never])
    assert err.value.code() is grpc.StatusCode.ABORTED
    assert "envelopes before index 1 were published" in (err.value.details() or "")
    node_a = order_for(network, b"\x00" + group_id(a))[0]
    assert await stored_count(nodes[node_a].address, node_a) == 1


def _no_aad() -> envelopes_pb2.ClientEnvelope:
    client = group_message_envelope(group_id(1), b"x")
    client.ClearField("aad")
    return client


def _bad_topic() -> envelopes_pb2.ClientEnvelope:
    client = group_message_envelope(group_id(1), b"x")
    client.aad.target_topic = b"\x09" + bytes(16)
    return client


def _mismatch() -> envelopes_pb2.ClientEnvelope:
    client = group_message_envelope(group_id(1), b"x")
    client.aad.target_topic = b"\x01" + bytes(32)
    return client


def _empty_message() -> envelopes_pb2.ClientEnvelope:
    return group_message_envelope(group_id(1), b"")


def _unknown_target() -> envelopes_pb2.ClientEnvelope:
    client = group_message_envelope(group_id(1), b"x")
    client.aad.target_originator = 12345
    return client


BAD = [
    ("no aad", _no_aad, "envelopes[1]: client envelope has no authenticated data (aad)"),
    ("unknown topic kind", _bad_topic, "envelopes[1]: aad.target_topic:"),
    ("topic kind mismatch", _mismatch, "envelopes[1]: topic kind WELCOME_MESSAGES does not match"),
    ("empty group message", _empty_message, "envelopes[1]: group message has no v1 data"),
    (
        "unknown target originator",
        _unknown_target,
        "envelopes[1]: aad.target_originator 12345 is not an enabled node",
    ),
]


@pytest.mark.parametrize(("name", "make", "message"), BAD, ids=[b[0] for b in BAD])
async def test_bad_envelopes_are_refused_before_anything_is_sent(
    start_node: Any, network: Network, gateway_for: Any, name: str, make: Any, message: str
) -> None:
    nodes = await start_all(start_node, network)
    gateway = await gateway_for()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await gateway.publish([group_message_envelope(group_id(1), b"ok"), make()])
    assert err.value.code() is INVALID, name
    assert (err.value.details() or "").startswith(message), err.value.details()
    for node_id, node in nodes.items():
        assert await stored_count(node.address, node_id) == 0


async def test_malformed_requests_are_invalid_argument(
    start_node: Any, network: Network, gateway_for: Any
) -> None:
    gateway = await gateway_for()
    raw_call = gateway.channel.unary_unary(
        "/xmtp.xmtpv4.payer_api.PayerApi/PublishClientEnvelopes",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    cases = {
        b"": "envelopes is empty",
        b"\x0a\x05ab": "request does not decode as xmtp.xmtpv4.payer_api.PublishClient",
        wire.field(1, b"\x0a\xff\xff"): "envelopes[0]: does not decode as a ClientEnvelope",
    }
    for request, message in cases.items():
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await raw_call(request, timeout=10)
        assert err.value.code() is INVALID
        assert message in (err.value.details() or ""), err.value.details()


async def test_too_many_envelopes_is_invalid_argument(gateway_for: Any) -> None:
    gateway = await gateway_for()
    request = payer_api.PublishClientEnvelopesRequest(
        envelopes=[group_message_envelope(group_id(1), b"x")] * 1001
    )
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await gateway.stub.PublishClientEnvelopes(request, timeout=10)
    assert err.value.code() is INVALID
    assert "1001 envelopes in one request, the limit is 1000" in (err.value.details() or "")


async def test_concurrent_requests_for_one_node_each_get_their_own_answer(
    start_node: Any, network: Network, gateway_for: Any
) -> None:
    """Requests that wait for a busy node are sent to it together (gateway/batching.py); a
    refusal of one still reaches only its own client, and nothing is stored twice."""
    nodes = await start_all(start_node, network)
    gateway = await gateway_for()
    topic = b"\x00" + group_id(7)
    preferred = order_for(network, topic)[0]
    bad_at = 13

    def request(i: int) -> list[envelopes_pb2.ClientEnvelope]:
        ahead = Cursor({preferred: 999}) if i == bad_at else None
        return [group_message_envelope(group_id(7), f"m{i}-{j}".encode(), ahead) for j in (0, 1)]

    results = await asyncio.gather(
        *(gateway.publish(request(i)) for i in range(40)), return_exceptions=True
    )
    refused = results[bad_at]
    assert isinstance(refused, grpc.aio.AioRpcError)
    assert refused.code() is grpc.StatusCode.ABORTED
    assert (refused.details() or "").startswith("envelopes[0]: depends_on is ahead"), refused
    for i, answer in enumerate(results):
        if i == bad_at:
            continue
        assert isinstance(answer, list), (i, answer)
        got = [parse_originator_envelope(e.SerializeToString()).payer_envelope for e in answer]
        assert [p.unsigned_client_envelope for p in got] == [
            c.SerializeToString() for c in request(i)
        ]
    assert await stored_count(nodes[preferred].address, preferred) == 78


async def test_clients_with_a_jwt_from_the_applications_backend_publish(
    start_node: Any, network: Network, gateway_for: Any, tmp_path: Any
) -> None:
    """The gateway takes a JWT signed by a configured key as the client's identity; without
    one, or with a token it cannot verify, nothing is published (UNAUTHENTICATED)."""
    nodes = await start_all(start_node, network)
    backend = ed25519.Ed25519PrivateKey.generate()
    keys = tmp_path / "jwt-keys.pem"
    keys.write_bytes(
        backend.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    gateway = await gateway_for(jwt_public_keys_file=str(keys), jwt_audience="xmtp")
    claims = {"sub": "alice", "aud": "xmtp", "exp": int(time.time()) + 60}
    good = jwt.encode(claims, backend, algorithm="EdDSA")
    forged = jwt.encode(claims, ed25519.Ed25519PrivateKey.generate(), algorithm="EdDSA")
    topic = b"\x00" + group_id(9)
    preferred = order_for(network, topic)[0]
    request = payer_api.PublishClientEnvelopesRequest(
        envelopes=[group_message_envelope(group_id(9), b"with a token")]
    )
    answer = await gateway.stub.PublishClientEnvelopes(
        request, metadata=[("authorization", f"Bearer {good}")], timeout=30
    )
    assert len(answer.originator_envelopes) == 1
    for metadata, why in (
        ([], "a JWT is required"),
        ([("authorization", f"Bearer {forged}")], "JWT refused"),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await gateway.stub.PublishClientEnvelopes(request, metadata=metadata, timeout=30)
        assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
        assert why in (refused.value.details() or ""), refused.value.details()
    assert await stored_count(nodes[preferred].address, preferred) == 1
