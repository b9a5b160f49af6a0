"""The replication stream's token check and MisbehaviorApi, on a real node and Postgres."""

from __future__ import annotations

import time
from typing import Any

import grpc
import pytest

from tests.conftest import Network
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xmtp.xmtpv4.message_api import misbehavior_api_pb2_grpc
from xnode.client.node import NodeClient, group_message_envelope
from xnode.core.crypto import SigningKey, misbehavior_digest, recover_public_key
from xnode.core.envelopes import build_payer_envelope, originate, validate_payer_envelope
from xnode.core.node_tokens import issue_token
from xnode.core.wire import originator_envelopes

GROUP = bytes(range(16))
SUBSCRIBE_ORIGINATORS = "/xmtp.xmtpv4.message_api.ReplicationApi/SubscribeOriginators"


async def first_frame(address: str, metadata: tuple[tuple[str, str], ...]) -> bytes:
    request = api.SubscribeOriginatorsRequest(
        filter=api.SubscribeOriginatorsRequest.OriginatorFilter(originator_node_ids=[100])
    )
    async with grpc.aio.insecure_channel(address) as channel:
        subscribe = channel.unary_stream(
            SUBSCRIBE_ORIGINATORS,
            request_serializer=api.SubscribeOriginatorsRequest.SerializeToString,
            response_deserializer=bytes,
        )
        call = subscribe(request, metadata=metadata, timeout=10)
        frame: bytes = await call.__aiter__().__anext__()
        call.cancel()
        return frame


def signed_by(
    key: SigningKey, node_id: int, seq: int, text: bytes
) -> envelopes_pb2.OriginatorEnvelope:
    payer = build_payer_envelope(
        group_message_envelope(GROUP, text), SigningKey.generate(), node_id
    )
    valid = validate_payer_envelope(payer, node_id)
    raw = originate(valid, node_id, seq, time.time_ns(), key).raw
    return envelopes_pb2.OriginatorEnvelope.FromString(raw)


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


async def test_subscribe_originators_needs_a_valid_node_token(
    start_node: Any, network: Network
) -> None:
    node = await start_node(**network.settings(100))
    async with NodeClient(node.address) as client:
        await client.publish_group_messages(SigningKey.generate(), 100, GROUP, [b"x"])
    keys, now = network.spec.keys, int(time.time())
    good = issue_token(keys[200], 200, 100, now)
    frame = await first_frame(node.address, (("node-authorization", good),))
    assert len(originator_envelopes(frame)) == 1
    assert len(originator_envelopes(await first_frame(node.address, bearer(good)))) == 1

    stranger = SigningKey.generate()
    refused = {
        "no node token": (),
        "token expired": (("node-authorization", issue_token(keys[200], 200, 100, now - 7200)),),
        "audience is not this node (100)": bearer(issue_token(keys[200], 200, 300, now)),
        "node 400 is not registered": bearer(issue_token(stranger, 400, 100, now)),
        "does not recover to node 300's registry key": bearer(issue_token(stranger, 300, 100, now)),
    }
    for reason, metadata in refused.items():
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await first_frame(node.address, metadata)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED, reason
        assert reason in (err.value.details() or ""), err.value.details()


async def test_client_apis_stay_open(start_node: Any, network: Network) -> None:
    node = await start_node(**network.settings(100))
    async with NodeClient(node.address) as client:
        await client.publish_group_messages(SigningKey.generate(), 100, GROUP, [b"x"])
        assert len(await client.query(originators=[100])) == 1


async def test_misbehavior_api_refuses_node_flagged_client_reports_and_serves_signed_ones(
    start_node: Any, network: Network
) -> None:
    node = await start_node(**network.settings(100))
    key = network.spec.keys[200]
    fork = [signed_by(key, 200, 5, b"one"), signed_by(key, 200, 5, b"two")]
    report = mb.UnsignedMisbehaviorReport(
        reporter_time_ns=1,
        misbehaving_node_id=200,
        type=mb.MISBEHAVIOR_DUPLICATE_SEQUENCE_ID,
        safety=mb.SafetyFailure(envelopes=fork),
    )
    async with grpc.aio.insecure_channel(node.address) as channel:
        stub = misbehavior_api_pb2_grpc.MisbehaviorApiStub(channel)
        honest = mb.UnsignedMisbehaviorReport()
        honest.CopyFrom(report)
        honest.safety.envelopes[1].CopyFrom(signed_by(key, 200, 6, b"two"))
        forged = mb.UnsignedMisbehaviorReport()
        forged.CopyFrom(report)
        forged.safety.envelopes[1].CopyFrom(signed_by(SigningKey.generate(), 200, 5, b"two"))
        for misleading, failure in [
            (honest, "no two envelopes with one sequence id"),
            (forged, "envelope 1: not signed by node 200's registry key"),
        ]:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.SubmitMisbehaviorReport(
                    mb.SubmitMisbehaviorReportRequest(report=misleading)
                )
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert failure in (err.value.details() or ""), err.value.details()
        flagged = mb.UnsignedMisbehaviorReport()
        flagged.CopyFrom(report)
        flagged.submitted_by_node = True
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.SubmitMisbehaviorReport(mb.SubmitMisbehaviorReportRequest(report=flagged))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "submitted_by_node must be false" in (err.value.details() or "")

        for _ in range(3):
            await stub.SubmitMisbehaviorReport(mb.SubmitMisbehaviorReportRequest(report=report))
        everything = await stub.QueryMisbehaviorReports(mb.QueryMisbehaviorReportsRequest())
        times = [r.server_time_ns for r in everything.reports]
        assert times == sorted(set(times))  # strictly increasing: safe to page by
        for r in everything.reports:  # the node's own (peers 200, 300 are down) and clients'
            digest = misbehavior_digest(r.unsigned_misbehavior_report)
            assert (
                recover_public_key(r.signature.bytes, digest) == network.spec.keys[100].public_key
            )
        clients = [
            r
            for r in everything.reports
            if not mb.UnsignedMisbehaviorReport.FromString(
                r.unsigned_misbehavior_report
            ).submitted_by_node
        ]
        assert len(clients) == 3
        assert all(
            mb.UnsignedMisbehaviorReport.FromString(r.unsigned_misbehavior_report) == report
            for r in clients
        )
        later = await stub.QueryMisbehaviorReports(
            mb.QueryMisbehaviorReportsRequest(after_ns=times[0])
        )
        # The node keeps reporting its absent peers, so newer reports may follow.
        assert [r.server_time_ns for r in later.reports][: len(times) - 1] == times[1:]


async def test_misbehavior_numbers_beyond_the_store_are_answered_not_unavailable(
    start_node: Any, network: Network
) -> None:
    node = await start_node(**network.settings(100))
    envelope = envelopes_pb2.OriginatorEnvelope(unsigned_originator_envelope=b"u")
    report = mb.UnsignedMisbehaviorReport(
        misbehaving_node_id=2**32 - 1,
        type=mb.MISBEHAVIOR_DUPLICATE_SEQUENCE_ID,
        safety=mb.SafetyFailure(envelopes=[envelope, envelope]),
    )
    async with grpc.aio.insecure_channel(node.address) as channel:
        stub = misbehavior_api_pb2_grpc.MisbehaviorApiStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.SubmitMisbehaviorReport(mb.SubmitMisbehaviorReportRequest(report=report))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "misbehaving_node_id: node id" in (err.value.details() or "")
        latest = await stub.QueryMisbehaviorReports(
            mb.QueryMisbehaviorReportsRequest(after_ns=2**64 - 1)
        )
        assert list(latest.reports) == []
