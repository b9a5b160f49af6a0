"""Query paging, subscriptions, the other API names, health and reflection."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2

from tests.conftest import node_settings
from xmtp.identity.associations import association_pb2
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import (
    message_api_pb2 as api,
)
from xmtp.xmtpv4.message_api import (
    publish_api_pb2_grpc,
    query_api_pb2_grpc,
)
from xnode.client.grpc_services import health_check, reflection_info
from xnode.client.node import NodeClient, group_message_envelope
from xnode.core.crypto import SigningKey
from xnode.core.cursors import Cursor
from xnode.core.envelopes import build_payer_envelope, parse_originator_envelope

PAYER = SigningKey.generate()
GROUPS = [bytes([g]) * 16 for g in range(3)]


def seqs(envelopes: list[envelopes_pb2.OriginatorEnvelope]) -> list[int]:
    return [parse_originator_envelope(e.SerializeToString()).sequence_id for e in envelopes]


async def test_query_pages_with_the_returned_cursor_never_skip(
    start_node: Any, database: str, node_spec: Any
) -> None:
    node = await start_node(**node_settings(database, node_spec))
    async with NodeClient(node.address) as client:
        for i in range(30):
            await client.publish_group_messages(PAYER, 100, GROUPS[i % 3], [b"m%d" % i])
        topics = [b"\x00" + GROUPS[0], b"\x00" + GROUPS[2]]
        cursor, seen = Cursor(), []
        while page := await client.query(topics=topics, cursor=cursor, limit=4):
            got = seqs(page)
            seen += got
            cursor = cursor.advanced(100, max(got))
    assert seen == [s for s in range(1, 31) if (s - 1) % 3 != 1]


async def test_subscribe_catches_up_then_goes_live(
    start_node: Any, database: str, node_spec: Any
) -> None:
    node = await start_node(**node_settings(database, node_spec))
    topic = b"\x00" + GROUPS[0]
    async with NodeClient(node.address) as client:
        await client.publish_group_messages(PAYER, 100, GROUPS[0], [b"a", b"b", b"c"])
        call = client.subscribe(topics=[topic], cursor=Cursor({100: 1}))
        received: list[int] = []
        responses = call.__aiter__()
        while len(received) < 2:  # catch-up: 2 and 3
            received += seqs(list((await responses.__anext__()).envelopes))
        await client.publish_group_messages(PAYER, 100, GROUPS[1], [b"other topic"])
        await client.publish_group_messages(PAYER, 100, GROUPS[0], [b"d", b"e"])
        while len(received) < 4:
            received += seqs(list((await responses.__anext__()).envelopes))
        call.cancel()
    assert received == [2, 3, 5, 6]


async def test_keepalive_is_an_empty_response(
    start_node: Any, database: str, node_spec: Any
) -> None:
    node = await start_node(**node_settings(database, node_spec, keepalive_seconds=0.2))
    async with NodeClient(node.address) as client:
        call = client.subscribe(topics=[b"\x00" + GROUPS[0]])
        responses = call.__aiter__()
        first = await asyncio.wait_for(responses.__anext__(), 5)  # caught up
        second = await asyncio.wait_for(responses.__anext__(), 5)  # keepalive
        call.cancel()
    assert list(first.envelopes) == [] and list(second.envelopes) == []


async def test_query_api_publish_api_and_subscribe_topics(
    start_node: Any, database: str, node_spec: Any
) -> None:
    node = await start_node(**node_settings(database, node_spec))
    async with NodeClient(node.address) as client:
        publish = publish_api_pb2_grpc.PublishApiStub(client.channel)
        query = query_api_pb2_grpc.QueryApiStub(client.channel)
        env = build_payer_envelope(group_message_envelope(GROUPS[0], b"x"), PAYER, 100)
        published = await publish.PublishPayerEnvelopes(
            api.PublishPayerEnvelopesRequest(payer_envelopes=[env])
        )
        topic = b"\x00" + GROUPS[0]
        found = await query.QueryEnvelopes(
            api.QueryEnvelopesRequest(query=api.EnvelopesQuery(topics=[topic]))
        )
        assert list(found.envelopes) == list(published.originator_envelopes)
        newest = await query.GetNewestEnvelope(
            api.GetNewestEnvelopeRequest(topics=[topic, b"\x00" + GROUPS[1]])
        )
        assert newest.results[0].originator_envelope == published.originator_envelopes[0]
        assert not newest.results[1].HasField("originator_envelope")
        stream = query.SubscribeTopics(
            api.SubscribeTopicsRequest(
                filters=[api.SubscribeTopicsRequest.TopicFilter(topic=topic)]
            )
        )
        kinds = []
        async for response in stream:
            kind = response.WhichOneof("response")
            kinds.append(kind)
            if kind == "status_update" and response.status_update.status == 2:
                break
        stream.cancel()
        inbox = await query.GetInboxIds(
            api.GetInboxIdsRequest(
                requests=[
                    api.GetInboxIdsRequest.Request(
                        identifier="0xabc", identifier_kind=association_pb2.IDENTIFIER_KIND_ETHEREUM
                    )
                ]
            )
        )
    assert kinds == ["status_update", "envelopes", "status_update"]
    assert inbox.responses[0].identifier == "0xabc"
    assert not inbox.responses[0].HasField("inbox_id")


async def test_health_and_reflection(start_node: Any, database: str, node_spec: Any) -> None:
    node = await start_node(**node_settings(database, node_spec))
    async with grpc.aio.insecure_channel(node.address) as channel:
        health = health_check(channel)
        status = await health(
            health_pb2.HealthCheckRequest(service="xmtp.xmtpv4.message_api.ReplicationApi")
        )
        assert status.status == health_pb2.HealthCheckResponse.SERVING
        stub = reflection_info(channel)
        call = stub(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
        names = {s.name async for r in call for s in r.list_services_response.service}
    assert {
        "xmtp.xmtpv4.message_api.ReplicationApi",
        "xmtp.xmtpv4.message_api.QueryApi",
        "xmtp.xmtpv4.message_api.PublishApi",
        "grpc.health.v1.Health",
    } <= names
