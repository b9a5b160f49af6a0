"""Every kind of bad input gets a precise status and a clear message, and stores nothing."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from tests.conftest import node_settings
from tests.support.statuses import trailers
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xnode.api.errors import CURSOR_TRAILER
from xnode.client.node import NodeClient, group_message_envelope
from xnode.core.crypto import SigningKey
from xnode.core.cursors import Cursor
from xnode.core.envelopes import build_payer_envelope

GROUP = bytes(range(16))
TOPIC = b"\x00" + GROUP
PAYER = SigningKey.generate()
INVALID = grpc.StatusCode.INVALID_ARGUMENT


def good(data: bytes = b"ok", depends_on: Cursor | None = None) -> envelopes_pb2.PayerEnvelope:
    return build_payer_envelope(group_message_envelope(GROUP, data, depends_on), PAYER, 100)


def with_client(**changes: Any) -> envelopes_pb2.PayerEnvelope:
    client = group_message_envelope(GROUP, b"x")
    for name, value in changes.items():
        if name == "topic":
            client.aad.target_topic = value
        elif name == "no_payload":
            client.ClearField("group_message")
    return build_payer_envelope(client, PAYER, 100)


def no_signature() -> envelopes_pb2.PayerEnvelope:
    env = good()
    env.ClearField("payer_signature")
    return env


def bad_signature() -> envelopes_pb2.PayerEnvelope:
    env = good()
    env.payer_signature.bytes = env.payer_signature.bytes[:64] + b"\x07"
    return env


def garbage_client() -> envelopes_pb2.PayerEnvelope:
    env = good()
    env.unsigned_client_envelope = b"\x0a\xff\xff\xff\xff"
    return env


CASES = [
    ("undecodable client envelope", garbage_client, "does not decode"),
    ("missing payload", lambda: with_client(no_payload=True), "no payload"),
    (
        "wrong target",
        lambda: build_payer_envelope(group_message_envelope(GROUP, b"x"), PAYER, 300),
        "target originator 300 is not this node (100)",
    ),
    ("kind mismatch", lambda: with_client(topic=b"\x03" + b"k" * 32), "does not match payload"),
    ("empty topic", lambda: with_client(topic=b""), "topic is empty"),
    ("topic too long", lambda: with_client(topic=b"\x00" + b"x" * 200), "limit is 128"),
    ("missing signature", no_signature, "payer_signature is missing"),
    ("bad signature", bad_signature, "recovery id"),
]


@pytest.fixture
async def node(start_node: Any, database: str, node_spec: Any) -> Any:
    return await start_node(**node_settings(database, node_spec))


async def stored_count(client: NodeClient) -> int:
    return len(await client.query(originators=[100], limit=1000))


@pytest.mark.parametrize(("name", "make", "message"), CASES, ids=[c[0] for c in CASES])
async def test_bad_envelope_in_a_batch_is_named_and_nothing_is_stored(
    node: Any, name: str, make: Any, message: str
) -> None:
    async with NodeClient(node.address) as client:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client.publish([good(b"1"), make(), good(b"3")])
        assert err.value.code() == INVALID, name
        details = err.value.details() or ""
        assert details.startswith("payer_envelopes[1]: ") and message in details, details
        assert await stored_count(client) == 0


async def test_undecodable_request_bytes(node: Any) -> None:
    async with NodeClient(node.address) as client:
        raw = client.channel.unary_unary(
            "/xmtp.xmtpv4.message_api.ReplicationApi/PublishPayerEnvelopes",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await raw(b"\x0a\x05\xff\xff")
        assert err.value.code() == INVALID
        assert "does not decode as xmtp.xmtpv4.message_api.PublishPayerEnvelopesRequest" in (
            err.value.details() or ""
        )
        assert await stored_count(client) == 0


async def test_empty_publish(node: Any) -> None:
    async with NodeClient(node.address) as client:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client.publish([])
    assert err.value.code() == INVALID and "empty" in (err.value.details() or "")


async def test_oversize_message_is_resource_exhausted(node: Any) -> None:
    async with NodeClient(node.address) as client:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client.publish([good(b"x" * (26 * 1024 * 1024))])
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert await stored_count(client) == 0


async def test_depends_on_ahead_is_aborted_with_the_node_cursor(node: Any) -> None:
    async with NodeClient(node.address) as client:
        await client.publish([good(b"first")])
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client.publish([good(b"late", depends_on=Cursor({100: 1, 200: 7}))])
        assert err.value.code() == grpc.StatusCode.ABORTED
        assert "200:7" in (err.value.details() or "")
        found = trailers(err.value)
        cursor = envelopes_pb2.Cursor.FromString(found[CURSOR_TRAILER])
        assert dict(cursor.node_id_to_sequence_id) == {100: 1}
        assert await stored_count(client) == 1


async def test_query_limits_and_exclusive_filters(node: Any) -> None:
    async with NodeClient(node.address) as client:
        stub = client.replication
        cases = [
            (api.EnvelopesQuery(topics=[TOPIC], originator_node_ids=[100]), "not both"),
            (api.EnvelopesQuery(), "set topics or originator_node_ids"),
            (
                api.EnvelopesQuery(
                    topics=[b"\x00" + bytes([i % 256, i // 256]) for i in range(1025)]
                ),
                "limit is 1024",
            ),
            (
                api.EnvelopesQuery(
                    topics=[TOPIC],
                    last_seen=envelopes_pb2.Cursor(
                        node_id_to_sequence_id={i: 1 for i in range(1025)}
                    ),
                ),
                "cursor has 1025 entries",
            ),
            (api.EnvelopesQuery(topics=[b"\x07abc"]), "unknown topic kind"),
        ]
        for query, message in cases:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.QueryEnvelopes(api.QueryEnvelopesRequest(query=query))
            assert err.value.code() == INVALID and message in (err.value.details() or ""), message
            with pytest.raises(grpc.aio.AioRpcError) as err:
                async for _ in stub.SubscribeEnvelopes(api.SubscribeEnvelopesRequest(query=query)):
                    pass
            assert err.value.code() == INVALID, message
