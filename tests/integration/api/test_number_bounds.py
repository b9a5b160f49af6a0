"""Numbers a client sends beyond what the store can hold are INVALID_ARGUMENT naming the
field, answered before the database is asked (never UNAVAILABLE, which means retry)."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from tests.conftest import node_settings
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xnode.client.node import NodeClient, group_message_envelope
from xnode.core.crypto import SigningKey
from xnode.core.cursors import MAX_NODE_ID, MAX_SEQUENCE_ID
from xnode.core.envelopes import build_payer_envelope

TOPIC = b"\x00" + bytes(range(16))
BIG_NODE = MAX_NODE_ID + 1
BIG_SEQ = MAX_SEQUENCE_ID + 1


@pytest.fixture
async def node(start_node: Any, database: str, node_spec: Any) -> Any:
    return await start_node(**node_settings(database, node_spec))


def cursor(node_id: int, seq: int) -> envelopes_pb2.Cursor:
    return envelopes_pb2.Cursor(node_id_to_sequence_id={node_id: seq})


QUERIES = [
    (
        "originator id",
        api.EnvelopesQuery(originator_node_ids=[100, BIG_NODE]),
        "originator_node_ids[1]",
    ),
    (
        "cursor node id",
        api.EnvelopesQuery(topics=[TOPIC], last_seen=cursor(BIG_NODE, 1)),
        "node id",
    ),
    (
        "cursor sequence id",
        api.EnvelopesQuery(topics=[TOPIC], last_seen=cursor(100, BIG_SEQ)),
        "sequence id",
    ),
]


@pytest.mark.parametrize(("name", "query", "message"), QUERIES, ids=[q[0] for q in QUERIES])
async def test_query_and_subscribe_numbers_beyond_the_store(
    node: Any, name: str, query: api.EnvelopesQuery, message: str
) -> None:
    async with NodeClient(node.address) as client:
        stub = client.replication
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.QueryEnvelopes(api.QueryEnvelopesRequest(query=query))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
        assert message in (err.value.details() or ""), err.value.details()
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in stub.SubscribeEnvelopes(api.SubscribeEnvelopesRequest(query=query)):
                pass
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
        assert message in (err.value.details() or ""), err.value.details()


async def test_depends_on_beyond_the_store_names_the_field(node: Any) -> None:
    payer = SigningKey.generate()
    client_envelope = group_message_envelope(TOPIC[1:], b"x")
    client_envelope.aad.depends_on.node_id_to_sequence_id[100] = BIG_SEQ
    async with NodeClient(node.address) as client:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client.publish([build_payer_envelope(client_envelope, payer, 100)])
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "aad.depends_on" in (err.value.details() or ""), err.value.details()
        assert await client.query(originators=[100]) == []
