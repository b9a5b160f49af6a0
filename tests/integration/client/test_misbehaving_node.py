"""xnode.client against a misbehaving node: a fake node (in the registry as node 200) serves a
tampered copy of a real envelope of node 100; the client refuses it with the precise check
and fails over to the real node."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from tests.conftest import Network
from tests.support.fake_peer import serve_replication_methods
from tests.support.waiting import eventually_value
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.client.network import NetworkClient, NoNodeAvailable
from xnode.client.node import NodeClient, group_message_envelope
from xnode.core.client_checks import BadOriginatorSignature
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import build_payer_envelope, originate, validate_payer_envelope
from xnode.core.misbehavior import FAILED_REQUEST, INVALID_PAYLOAD
from xnode.core.originator_selection import available_nodes, failover_order
from xnode.core.registry import NodeEntry, Registry
from xnode.core.topics import Topic, TopicKind


def tampered(raw: bytes) -> bytes:
    """The same envelope with its payer envelope's bytes changed under the signature."""
    envelope = envelopes_pb2.OriginatorEnvelope.FromString(raw)
    unsigned = envelopes_pb2.UnsignedOriginatorEnvelope.FromString(
        envelope.unsigned_originator_envelope
    )
    unsigned.payer_envelope_bytes = unsigned.payer_envelope_bytes[:-1] + b"\x00"
    envelope.unsigned_originator_envelope = unsigned.SerializeToString()
    return envelope.SerializeToString()


def group_preferring(registry: Registry, node_id: int) -> bytes:
    """A group whose topic's preferred node is `node_id`."""
    nodes = available_nodes(registry)
    for g in range(256):
        group = bytes([g]) * 16
        if failover_order(Topic(TopicKind.GROUP_MESSAGES, group).raw, nodes)[0] == node_id:
            return group
    raise AssertionError("no such group")


async def fake_node(address: str, envelopes: list[bytes]) -> grpc.aio.Server:
    answer = api.QueryEnvelopesResponse(
        envelopes=[envelopes_pb2.OriginatorEnvelope.FromString(raw) for raw in envelopes]
    ).SerializeToString()

    async def query(_request: bytes, _context: Any) -> bytes:
        return answer

    async def subscribe(_request: bytes, _context: Any) -> AsyncIterator[bytes]:
        yield answer

    return await serve_replication_methods(
        {
            "QueryEnvelopes": grpc.unary_unary_rpc_method_handler(
                query, request_deserializer=bytes, response_serializer=bytes
            ),
            "SubscribeEnvelopes": grpc.unary_stream_rpc_method_handler(
                subscribe, request_deserializer=bytes, response_serializer=bytes
            ),
        },
        address,
    )


async def test_a_tampered_envelope_is_refused_and_the_client_fails_over(
    start_node: Any, network: Network
) -> None:
    await start_node(**network.settings(100))
    full = Registry.from_json(network.spec.nodes_file.read_text())
    registry = Registry([full.nodes[100], full.nodes[200]])  # 300 never runs here
    group = group_preferring(registry, 200)
    topic = Topic(TopicKind.GROUP_MESSAGES, group).raw
    async with NetworkClient(registry, deadline_s=10) as writer:
        writer.exclude(200)  # publish on the real node (the fake answers no publish)
        sent = await writer.publish_group_messages(group, [b"one", b"two"])
    assert [e.originator_node_id for e in sent] == [100, 100]
    fake = await fake_node(network.addresses[200], [tampered(e.raw) for e in sent])
    try:
        async with NetworkClient(registry, deadline_s=10) as reader:
            found = await reader.query([topic])
            assert [e.raw for e in found] == [e.raw for e in sent]
            assert [r.node_id for r in reader.refusals] == [200]
            assert isinstance(reader.refusals[0].check, BadOriginatorSignature)

            reader.excluded.clear()  # the subscription starts on the fake again
            subscription = reader.subscribe([topic])
            got = []
            async for env in subscription:
                got.append(env.raw)
                if len(got) == 2:
                    subscription.close()
            assert got == [e.raw for e in sent]
            assert subscription.nodes_used[:2] == [200, 100]
            assert [r.node_id for r in reader.refusals] == [200, 200]

        # With node 100 disabled (its key still known), the fake is the only node to ask.
        real = full.nodes[100]
        disabled = NodeEntry(100, real.public_key, real.http_address, enabled=False)
        async with NetworkClient(Registry([disabled, full.nodes[200]]), deadline_s=1) as alone:
            with pytest.raises(NoNodeAvailable) as failed:
                await alone.query([topic])
            assert isinstance(failed.value.__cause__, BadOriginatorSignature)
            assert "signed by" in str(failed.value.__cause__)
    finally:
        await fake.stop(None)


def wrongly_targeted(spec: Any, group: bytes) -> bytes:
    """An envelope node 200 really signed whose payer envelope names node 300 as its target:
    it breaks the payer-envelope rule, provably (core.evidence)."""
    client = group_message_envelope(group, b"misrouted")
    payer = build_payer_envelope(client, SigningKey.generate(), 300)
    valid = validate_payer_envelope(payer, 300)
    return originate(valid, 200, 1, time.time_ns(), spec.keys[200]).raw


async def reports_held_by(address: str) -> list[mb.UnsignedMisbehaviorReport]:
    async with NodeClient(address) as node:
        response = await node.misbehavior.QueryMisbehaviorReports(
            mb.QueryMisbehaviorReportsRequest(after_ns=0), timeout=10
        )
    return [
        mb.UnsignedMisbehaviorReport.FromString(r.unsigned_misbehavior_report)
        for r in response.reports
    ]


async def test_a_provable_invalid_payload_is_reported_to_another_node(
    start_node: Any, network: Network
) -> None:
    """The client reports what proves itself, to nodes other than the accused, and nothing
    for an envelope whose signature is not the node's (it proves nothing against it)."""
    await start_node(**network.settings(100))
    full = Registry.from_json(network.spec.nodes_file.read_text())
    registry = Registry([full.nodes[100], full.nodes[200]])
    group = group_preferring(registry, 200)
    topic = Topic(TopicKind.GROUP_MESSAGES, group).raw
    async with NetworkClient(registry, deadline_s=10) as writer:
        writer.exclude(200)
        sent = await writer.publish_group_messages(group, [b"one"])
    evidence = wrongly_targeted(network.spec, group)
    fake = await fake_node(network.addresses[200], [evidence])
    try:
        async with NetworkClient(registry, deadline_s=10) as reader:
            assert [e.raw for e in await reader.query([topic])] == [sent[0].raw]
            assert reader.refusals and reader.refusals[0].node_id == 200
        held = await until_reported(network.addresses[100], 200)
        assert held.type == INVALID_PAYLOAD
        assert held.safety.envelopes[0].SerializeToString() == evidence
        assert reader.reporter is not None
        assert [(s.misbehaving_node_id, s.to_node_id) for s in reader.reporter.sent] == [(200, 100)]
    finally:
        await fake.stop(None)

    forged = await fake_node(network.addresses[200], [tampered(sent[0].raw)])
    try:
        async with NetworkClient(registry, deadline_s=10) as reader:
            await reader.query([topic])
            assert [r.node_id for r in reader.refusals] == [200]
        assert reader.reporter is not None and reader.reporter.sent == []
    finally:
        await forged.stop(None)


async def test_a_node_that_is_down_is_reported_once_as_failed_requests(
    start_node: Any, network: Network
) -> None:
    await start_node(**network.settings(100))
    full = Registry.from_json(network.spec.nodes_file.read_text())
    registry = Registry([full.nodes[100], full.nodes[300]])  # 300 never runs here
    group = group_preferring(registry, 300)
    async with NetworkClient(registry, deadline_s=10) as client:
        for i in range(3):
            client.excluded.clear()  # each publish tries node 300 first
            await client.publish_group_messages(group, [f"m{i}".encode()])
    held = await until_reported(network.addresses[100], 300)
    assert held.type == FAILED_REQUEST
    assert held.HasField("liveness")
    assert client.reporter is not None
    assert [(s.misbehaving_node_id, s.type) for s in client.reporter.sent] == [
        (300, FAILED_REQUEST)
    ]


async def until_reported(address: str, accused: int) -> mb.UnsignedMisbehaviorReport:

    async def against() -> list[mb.UnsignedMisbehaviorReport]:
        return [
            r
            for r in await reports_held_by(address)
            if r.misbehaving_node_id == accused and not r.submitted_by_node  # a client's
        ]

    found = await eventually_value(against, bool, 10, f"a report against node {accused}")
    assert len(found) == 1, found
    return found[0]
