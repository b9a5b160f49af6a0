"""Publish and query through a real node on a real Postgres."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from xnode.client.node import NodeClient
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import parse_originator_envelope

GROUP = bytes(range(16))
TOPIC = b"\x00" + GROUP


async def test_publish_then_query_returns_signed_gap_free_envelopes(
    start_node: Any, database: str, node_spec: Any
) -> None:
    from tests.conftest import node_settings

    node = await start_node(**node_settings(database, node_spec))
    payer = SigningKey.generate()
    async with NodeClient(node.address) as client:
        sent = await client.publish_group_messages(payer, 100, GROUP, [b"a", b"b", b"c"])
        found = await client.query(topics=[TOPIC])
    parsed = [parse_originator_envelope(e.SerializeToString()) for e in found]
    assert [p.sequence_id for p in parsed] == [1, 2, 3]
    assert [e.SerializeToString() for e in sent] == [e.SerializeToString() for e in found]
    assert all(p.signer_public_key() == node_spec.keys[100].public_key for p in parsed)


async def test_wrong_target_is_invalid_argument(
    start_node: Any, database: str, node_spec: Any
) -> None:
    from tests.conftest import node_settings

    node = await start_node(**node_settings(database, node_spec))
    async with NodeClient(node.address) as client:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client.publish_group_messages(SigningKey.generate(), 200, GROUP, [b"x"])
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "target originator 200 is not this node (100)" in (err.value.details() or "")
