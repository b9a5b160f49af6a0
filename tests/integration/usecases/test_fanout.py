"""Live delivery on a real node: many streams on one topic each get every envelope, counted;
a stream whose client stops reading is ended UNAVAILABLE with its cursor, logged and counted,
and resumes from that cursor with nothing lost and nothing twice."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from prometheus_client import REGISTRY
from structlog.testing import capture_logs

from tests.conftest import node_settings
from tests.support.statuses import trailers
from tests.support.waiting import eventually
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xmtp.xmtpv4.message_api import message_api_pb2_grpc
from xnode.api.errors import CURSOR_TRAILER
from xnode.client.node import NodeClient
from xnode.core.crypto import SigningKey
from xnode.core.cursors import Cursor
from xnode.core.envelopes import cursor_from_proto, parse_originator_envelope

PAYER = SigningKey.generate()
GROUP = b"f" * 16
TOPIC = b"\x00" + GROUP
METHOD = {"method": "SubscribeEnvelopes"}


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, {**METHOD, **labels}) or 0.0


def seqs(envelopes: Any) -> list[int]:
    return [parse_originator_envelope(e.SerializeToString()).sequence_id for e in envelopes]


async def test_every_stream_of_a_topic_gets_every_envelope_and_each_is_counted(
    start_node: Any, database: str, node_spec: Any
) -> None:
    node = await start_node(**node_settings(database, node_spec, limits_enabled=False))
    before = sample("xnode_subscription_deliveries_total")
    async with NodeClient(node.address) as client:
        calls = [client.subscribe(topics=[TOPIC]) for _ in range(40)]
        streams = [call.__aiter__() for call in calls]
        for stream in streams:  # caught up: live from here on
            assert list((await stream.__anext__()).envelopes) == []
        for i in range(10):
            await client.publish_group_messages(PAYER, 100, GROUP, [b"m%d" % i, b"n%d" % i])

        async def receive(stream: Any) -> list[int]:
            got: list[int] = []
            while len(got) < 20:
                got += seqs((await stream.__anext__()).envelopes)
            return got

        received = await asyncio.wait_for(asyncio.gather(*map(receive, streams)), 30)
        for call in calls:
            call.cancel()
    assert all(got == list(range(1, 21)) for got in received)
    assert sample("xnode_subscription_deliveries_total") - before == 40 * 20


async def test_a_stream_that_stops_reading_is_ended_with_its_cursor_and_resumes(
    start_node: Any, database: str, node_spec: Any
) -> None:
    settings = node_settings(
        database, node_spec, limits_enabled=False, subscription_max_lag_seconds=0.2
    )
    node = await start_node(**settings)
    ended_before = sample("xnode_subscriptions_ended_total", reason="fell_behind")
    payload = b"x" * 200_000
    published: list[int] = []
    # The reader's windows stay small (no BDP probing): what it leaves unread stalls the
    # node's writes, as a slow client's would.
    slow = [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 1024)]
    async with (
        NodeClient(node.address) as client,
        NodeClient(node.address) as publisher,
        grpc.aio.insecure_channel(node.address, options=slow) as channel,
    ):
        reader = message_api_pb2_grpc.ReplicationApiStub(channel)
        request = api.SubscribeEnvelopesRequest(query=api.EnvelopesQuery(topics=[TOPIC]))
        call = reader.SubscribeEnvelopes(request)
        stream = call.__aiter__()
        assert list((await stream.__anext__()).envelopes) == []  # then it reads no more

        async def ended() -> bool:
            # Each publish fills more of the stream's flow-control windows, until the node's
            # writes wait longer than the lag allowed.
            unique = b"%d" % len(published) + payload  # a repeat would be a refused replay
            answered = await publisher.publish_group_messages(PAYER, 100, GROUP, [unique])
            published.extend(seqs(answered))
            fell = sample("xnode_subscriptions_ended_total", reason="fell_behind")
            return fell > ended_before

        with capture_logs() as logs:
            await eventually(ended, within_s=20)
        received: list[int] = []
        try:
            async for response in stream:
                received += seqs(response.envelopes)
            raise AssertionError("the stream was not ended")
        except grpc.aio.AioRpcError as exc:
            assert exc.code() is grpc.StatusCode.UNAVAILABLE
            assert "resubscribe from your last cursor" in (exc.details() or "")
            trailer = trailers(exc)[CURSOR_TRAILER]
        cursor = cursor_from_proto(envelopes_pb2.Cursor.FromString(trailer), "trailer")
        assert cursor == Cursor({100: received[-1]}) if received else Cursor()
        events = [e for e in logs if e["event"] == "subscription_fell_behind"]
        assert len(events) == 1 and events[0]["method"] == "SubscribeEnvelopes"

        resumed = client.subscribe(topics=[TOPIC], cursor=cursor)
        rest: list[int] = []
        async for response in resumed:  # catch-up from the cursor, then caught up (empty)
            if not response.envelopes:
                break
            rest += seqs(response.envelopes)
        resumed.cancel()
    assert received + rest == published == list(range(1, len(published) + 1))
