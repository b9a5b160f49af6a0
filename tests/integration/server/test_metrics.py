"""Served metrics carry the node id; refusals are counted per API, method and reason."""

from __future__ import annotations

import asyncio
import urllib.request
from typing import Any

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import NodeSpec, node_settings
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xmtp.xmtpv4.message_api import publish_api_pb2_grpc, query_api_pb2_grpc
from xnode.client.node import NodeClient
from xnode.core.crypto import SigningKey
from xnode.devtools.postgres import free_port

GROUP = bytes(range(16))


def _scrape(address: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_metrics_carry_the_node_and_rejections_name_api_method_and_reason(
    start_node: Any, database: str, node_spec: NodeSpec
) -> None:
    metrics = f"127.0.0.1:{free_port()}"
    node = await start_node(**node_settings(database, node_spec, metrics_address=metrics))
    async with NodeClient(node.address) as client:
        await client.publish_group_messages(SigningKey.generate(), 100, GROUP, [b"m"])
        with pytest.raises(grpc.aio.AioRpcError):
            await client.publish([])  # through ReplicationApi
        publish = publish_api_pb2_grpc.PublishApiStub(client.channel)
        with pytest.raises(grpc.aio.AioRpcError):
            await publish.PublishPayerEnvelopes(api.PublishPayerEnvelopesRequest())
        query = query_api_pb2_grpc.QueryApiStub(client.channel)
        with pytest.raises(grpc.aio.AioRpcError):
            await query.QueryEnvelopes(
                api.QueryEnvelopesRequest(
                    query=api.EnvelopesQuery(topics=[b"\x00" + GROUP], originator_node_ids=[1])
                )
            )
    samples = await asyncio.to_thread(_scrape, metrics)
    xnode = [key for key in samples if key[0].startswith("xnode_")]
    assert xnode and all(("node", "100") in labels for _, labels in xnode)
    assert not any(("node", "100") in labels for name, labels in samples if "xnode_" not in name)

    def rejected(api_name: str, method: str, reason: str) -> float:
        labels = {"api": api_name, "method": method, "reason": reason, "node": "100"}
        return samples.get(("xnode_requests_rejected_total", frozenset(labels.items())), 0)

    assert rejected("replication", "PublishPayerEnvelopes", "malformed") >= 1
    assert rejected("publish", "PublishPayerEnvelopes", "malformed") >= 1
    assert rejected("query", "QueryEnvelopes", "malformed") >= 1
    assert (
        samples[
            (
                "xnode_envelopes_stored_total",
                frozenset({"originator": "100", "node": "100"}.items()),
            )
        ]
        >= 1
    )


async def test_the_nodes_own_state_is_read_when_scraped(
    start_node: Any, database: str, node_spec: NodeSpec
) -> None:
    metrics = f"127.0.0.1:{free_port()}"
    node = await start_node(
        **node_settings(database, node_spec, metrics_address=metrics, db_pool_size=5)
    )
    async with NodeClient(node.address) as client:
        await client.publish_group_messages(SigningKey.generate(), 100, GROUP, [b"a", b"b"])
        await client.query(topics=[b"\x00" + GROUP])
    samples = await asyncio.to_thread(_scrape, metrics)

    def value(name: str, **labels: str) -> float:
        return samples[(name, frozenset({**labels, "node": "100"}.items()))]

    assert value("xnode_vector_clock_sequence_id", originator="100") == 2
    assert value("xnode_db_pool_connections", state="max") == 5
    assert 1 <= value("xnode_db_pool_connections", state="open") <= 5
    assert value("xnode_db_pool_connections", state="in_use") >= 0
    assert value("xnode_process_resident_memory_bytes") > 10 * 2**20
    assert value("xnode_request_seconds_count", api="replication", method="QueryEnvelopes") >= 1
