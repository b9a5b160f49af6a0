"""xnode.client against a misbehaving node: a fake node (in the registry as node 200) serves a
tampered copy of a real envelope of node 100; the client refuses it with the precise check
and fails over to the real node."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from tests.conftest import Network
from tests.fake_peer import serve_replication_methods
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xnode.client.network import NetworkClient, NoNodeAvailable
from xnode.core.client_checks import BadOriginatorSignature
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
