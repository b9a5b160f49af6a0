"""Clients behind a trusted proxy on a real node and Postgres: each client the proxy names in
`x-forwarded-for` has its own limits; the header from a peer the node does not trust changes
nothing; a trusted proxy's malformed header is charged to the proxy and logged once."""

from __future__ import annotations

from typing import Any

import grpc
from structlog.testing import capture_logs

from tests.conftest import NodeSpec, node_settings
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xmtp.xmtpv4.message_api import message_api_pb2_grpc
from xnode.client.node import CHANNEL_OPTIONS

ALICE, BOB = "203.0.113.1", "203.0.113.2"
# Two queries in a caller's bucket, and no refill to speak of during the test.
TWO_QUERIES: dict[str, Any] = {
    "limit_query_requests_per_second": 0.01,
    "limit_burst_seconds": 200.0,
}
QUERY = api.QueryEnvelopesRequest(query=api.EnvelopesQuery(topics=[b"\x00" + bytes(16)]))


async def queried(address: str, forwarded: str | None) -> str:
    """'ok', or the refusal's words."""
    metadata = (("x-forwarded-for", forwarded),) if forwarded is not None else ()
    async with grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        stub = message_api_pb2_grpc.ReplicationApiStub(channel)
        try:
            await stub.QueryEnvelopes(QUERY, metadata=metadata, timeout=10)
        except grpc.aio.AioRpcError as exc:
            assert exc.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, exc
            return exc.details() or ""
        return "ok"


async def charged(node: Any) -> set[str]:
    """The names of the node's buckets of query requests (store.limits)."""
    rows = await node.pool.fetch("SELECT key FROM limit_buckets WHERE key LIKE 'query:%:requests'")
    return {row["key"] for row in rows}


async def test_clients_behind_a_trusted_proxy_are_limited_apart(
    start_node: Any, database: str, node_spec: NodeSpec
) -> None:
    node = await start_node(
        **node_settings(database, node_spec, trusted_proxies="127.0.0.1, 10.0.0.0/8", **TWO_QUERIES)
    )
    answers = [await queried(node.address, ALICE) for _ in range(3)]
    assert answers[:2] == ["ok", "ok"]
    assert answers[2].startswith(f"ip {ALICE} is over its requests limit")
    # Bob, behind the same proxy, has his own bucket; so has the proxy itself.
    assert [await queried(node.address, f"1.1.1.1, {BOB}") for _ in range(2)] == ["ok", "ok"]
    assert await queried(node.address, None) == "ok"
    # A chain through two trusted proxies: the right-most address not trusted is the client.
    assert (await queried(node.address, f"{BOB}, 10.0.0.9")).startswith(f"ip {BOB} is over")
    assert await charged(node) == {
        f"query:ip:{ALICE}:requests",
        f"query:ip:{BOB}:requests",
        "query:ip:127.0.0.1:requests",
    }

    with capture_logs() as logged:
        assert await queried(node.address, "unknown") == "ok"  # the proxy's second query
        refused = await queried(node.address, f"{ALICE}, nonsense")
    assert refused.startswith("ip 127.0.0.1 is over its requests limit")
    warnings = [e for e in logged if e["event"] == "forwarded_for_malformed"]
    assert [(e["proxy"], e["header"]) for e in warnings] == [("127.0.0.1", "unknown")]


async def test_the_header_from_a_peer_that_is_not_trusted_is_ignored(
    start_node: Any, database: str, node_spec: NodeSpec
) -> None:
    node = await start_node(
        **node_settings(database, node_spec, trusted_proxies="192.0.2.0/24", **TWO_QUERIES)
    )
    assert [await queried(node.address, ALICE) for _ in range(2)] == ["ok", "ok"]
    refused = await queried(node.address, BOB)
    assert refused.startswith("ip 127.0.0.1 is over its requests limit")
    assert await charged(node) == {"query:ip:127.0.0.1:requests"}
