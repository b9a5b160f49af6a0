"""Tiny requests asking a real node (real Postgres) for big answers: every answer stops at its
byte budget and says so, a topic listed twice is refused, oversized reports are refused."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from tests.conftest import NodeSpec, node_settings
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xmtp.xmtpv4.message_api import misbehavior_api_pb2_grpc
from xnode.api.service import ANSWER_CUT_TRAILER
from xnode.client.node import NodeClient, group_message_envelope
from xnode.core.crypto import SigningKey
from xnode.core.cursors import Cursor
from xnode.core.envelopes import (
    build_payer_envelope,
    cursor_to_proto,
    parse_originator_envelope,
)
from xnode.core.sizes import MAX_LIVENESS_REPORT_BYTES
from xnode.core.topics import Topic, TopicKind
from xnode_api.withholding.v1 import withholding_pb2 as wh
from xnode_api.withholding.v1 import withholding_pb2_grpc

PAYER = SigningKey.generate()
GROUPS = [bytes([g]) * 16 for g in range(1, 4)]
ENVELOPE_BYTES = 100_000
SIZES = {
    "max_message_mib": 1,
    "max_payer_envelope_bytes": 150_000,
    "answer_budget_bytes": 250_000,  # two envelopes of 100 kB, not three
    "max_report_bytes": 200_000,
}


def topic(group: bytes) -> bytes:
    return Topic(TopicKind.GROUP_MESSAGES, group).raw


async def publish(client: NodeClient, group: bytes, count: int) -> None:
    await client.publish(
        [
            build_payer_envelope(
                group_message_envelope(group, bytes([i]) * ENVELOPE_BYTES), PAYER, 100
            )
            for i in range(count)
        ]
    )


async def query_page(client: NodeClient, cursor: Cursor) -> tuple[list[int], bool]:
    """(sequence ids, whether the budget cut the answer) of one QueryEnvelopes call."""
    call = client.replication.QueryEnvelopes(
        api.QueryEnvelopesRequest(
            query=api.EnvelopesQuery(
                topics=[topic(GROUPS[0])],
                last_seen=cursor_to_proto(cursor),
            ),
            limit=1000,
        )
    )
    answer = await call
    trailers = dict(await call.trailing_metadata() or ())
    ids = [parse_originator_envelope(e.SerializeToString()).sequence_id for e in answer.envelopes]
    return ids, trailers.get(ANSWER_CUT_TRAILER) == "bytes"


async def test_answers_stop_at_their_byte_budget_and_say_so(
    start_node: Any, database: str, node_spec: NodeSpec
) -> None:
    node = await start_node(**node_settings(database, node_spec, **SIZES))
    async with NodeClient(node.address) as client:
        await publish(client, GROUPS[0], 5)
        for group in GROUPS[1:]:
            await publish(client, group, 1)
        # A client pages on after a cut answer, as after a full page: nothing is skipped.
        pages, cursor = [], Cursor()
        while True:
            ids, cut = await query_page(client, cursor)
            pages.append((ids, cut))
            if not cut:
                break
            cursor = Cursor({100: ids[-1]})
        assert pages == [([1, 2], True), ([3, 4], True), ([5], False)]

        newest = client.replication.GetNewestEnvelope(
            api.GetNewestEnvelopeRequest(topics=[topic(g) for g in GROUPS])
        )
        answered = await newest
        assert len(answered.results) == 2  # the first two topics' envelopes fill the budget
        assert dict(await newest.trailing_metadata() or ())[ANSWER_CUT_TRAILER] == "bytes"
        with pytest.raises(grpc.aio.AioRpcError) as repeated:
            await client.replication.GetNewestEnvelope(
                api.GetNewestEnvelopeRequest(topics=[topic(GROUPS[1])] * 256)
            )
        assert repeated.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "topics[1] repeats topics[0]" in (repeated.value.details() or "")


async def holdings_page(channel: grpc.aio.Channel, first: int) -> tuple[int, int, bool]:
    """(the account's own last, envelopes in it, whether the budget cut it) of one
    GetSignedHoldings call for first..256."""
    stub = withholding_pb2_grpc.HoldingsApiStub(channel)
    call = stub.GetSignedHoldings(
        wh.GetSignedHoldingsRequest(originator_node_id=100, first=first, last=256)
    )
    answer = await call
    trailers = dict(await call.trailing_metadata() or ())
    account = wh.UnsignedHoldings.FromString(answer.holdings.unsigned_holdings)
    return account.last, len(account.envelopes), trailers.get(ANSWER_CUT_TRAILER) == "bytes"


async def test_signed_holdings_and_catch_up_stop_at_the_byte_budget(
    start_node: Any, database: str, node_spec: NodeSpec
) -> None:
    """A signed account of 256 sequence ids holds two 100 kB envelopes, signs that it goes
    to the second only, and says it was cut; a subscription's catch-up reads the same
    budget at a time and still delivers everything."""
    node = await start_node(**node_settings(database, node_spec, **SIZES))
    async with NodeClient(node.address) as client:
        await publish(client, GROUPS[0], 5)
        async with grpc.aio.insecure_channel(node.address) as channel:
            pages = [await holdings_page(channel, first) for first in (1, 3, 5)]
        assert pages == [(2, 2, True), (4, 2, True), (256, 1, False)]
        request = api.SubscribeEnvelopesRequest(query=api.EnvelopesQuery(topics=[topic(GROUPS[0])]))
        stream = client.replication.SubscribeEnvelopes(request, timeout=30)
        seen: list[int] = []
        async for message in stream:
            seen += [
                parse_originator_envelope(e.SerializeToString()).sequence_id
                for e in message.envelopes
            ]
            if len(seen) >= 5:
                break
        stream.cancel()
    assert seen == [1, 2, 3, 4, 5]


async def test_a_report_over_its_cap_is_refused_and_not_kept(
    start_node: Any, database: str, node_spec: NodeSpec
) -> None:
    node = await start_node(**node_settings(database, node_spec, **SIZES))
    padding = b"\x01" * 2 * MAX_LIVENESS_REPORT_BYTES
    liveness = mb.UnsignedMisbehaviorReport(
        reporter_time_ns=1,
        misbehaving_node_id=200,
        type=mb.MISBEHAVIOR_UNRESPONSIVE_NODE,
        liveness=mb.LivenessFailure(
            response_time_ns=1,
            subscribe=api.SubscribeEnvelopesRequest(query=api.EnvelopesQuery(topics=[padding])),
        ),
    )
    async with grpc.aio.insecure_channel(node.address) as channel:
        stub = misbehavior_api_pb2_grpc.MisbehaviorApiStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.SubmitMisbehaviorReport(mb.SubmitMisbehaviorReportRequest(report=liveness))
        assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "the limit for a liveness report (it carries one request) is" in (
            refused.value.details() or ""
        )
        kept = await stub.QueryMisbehaviorReports(mb.QueryMisbehaviorReportsRequest(after_ns=0))
    assert list(kept.reports) == []
