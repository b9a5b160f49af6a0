"""A node whose database refuses it answers every API UNAVAILABLE (retry later), with the one
message of the error mapping, and serves again once the database is back: the store's own
error (StoreUnavailable) crosses the layers, not the driver's."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import grpc
import pytest
from prometheus_client import REGISTRY
from structlog.testing import capture_logs

from tests.conftest import NodeSpec, database_refusing, node_settings
from tests.support.waiting import eventually
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.client.node import NodeClient, group_message_envelope
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import build_payer_envelope
from xnode.devtools.postgres import PgCluster
from xnode.usecases.health import DATABASE
from xnode_api.forks.v1 import forks_pb2, forks_pb2_grpc
from xnode_api.logs.v1 import logs_pb2, logs_pb2_grpc

GROUP = bytes(range(16))
RETRY_LATER = "the envelope store is unavailable; retry shortly"


async def status_of(call: Awaitable[Any]) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await call
    return failed.value.code(), failed.value.details() or ""


async def test_every_api_answers_unavailable_while_the_database_is_lost(
    start_node: Callable[..., Awaitable[Any]],
    pg_cluster: PgCluster,
    database: str,
    node_spec: NodeSpec,
) -> None:
    node = await start_node(**node_settings(database, node_spec))
    payer = build_payer_envelope(group_message_envelope(GROUP, b"m"), SigningKey.generate(), 100)
    async with (
        NodeClient(node.address) as client,
        grpc.aio.insecure_channel(node.address) as channel,
    ):
        forks = forks_pb2_grpc.ForkApiStub(channel)
        logs = logs_pb2_grpc.LogApiStub(channel)
        await client.publish([payer])
        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "QueryEnvelopes": lambda: client.query(originators=[100]),
            "QueryMisbehaviorReports": lambda: client.misbehavior.QueryMisbehaviorReports(
                mb.QueryMisbehaviorReportsRequest()
            ),
            "QueryForks": lambda: forks.QueryForks(
                forks_pb2.QueryForksRequest(originator_node_id=100)
            ),
            "GetCheckpoints": lambda: logs.GetCheckpoints(
                logs_pb2.GetCheckpointsRequest(originator_node_id=100)
            ),
        }
        async with database_refusing(pg_cluster, database):
            for method, call in calls.items():
                status = await status_of(call())
                assert status == (grpc.StatusCode.UNAVAILABLE, RETRY_LATER), method

        async def serving() -> bool:
            return len(await client.query(originators=[100])) == 1

        # UNAVAILABLE meant "retry later": the same node answers once its database is back.
        await eventually(serving, what="queries answered again")


REFUSED = 20


async def test_a_lost_database_is_logged_once_lost_and_once_back(
    start_node: Callable[..., Awaitable[Any]],
    pg_cluster: PgCluster,
    database: str,
    node_spec: NodeSpec,
) -> None:
    """Not one error per refused request: one `database_lost` naming the host, one
    `database_back` with how long and how many requests were refused, and the refusals in
    xnode_requests_rejected_total for dashboards."""
    node = await start_node(**node_settings(database, node_spec))
    labels = {"api": "replication", "method": "QueryEnvelopes", "reason": "unavailable"}
    counted = REGISTRY.get_sample_value("xnode_requests_rejected_total", labels) or 0
    async with NodeClient(node.address) as client:
        with capture_logs() as logged:
            async with database_refusing(pg_cluster, database):
                for _ in range(REFUSED):
                    status = await status_of(client.query(originators=[100]))
                    assert status == (grpc.StatusCode.UNAVAILABLE, RETRY_LATER)
                await eventually(lambda: DATABASE in node.health.down, what="the probe failing")

            def told(event: str) -> list[MutableMapping[str, Any]]:
                return [e for e in logged if e["event"] == event]

            await eventually(lambda: bool(told("database_back")), what="database_back")
            assert await client.query(originators=[100]) == []
    lost, back = told("database_lost"), told("database_back")
    assert len(lost) == 1 and len(back) == 1, [e["event"] for e in logged]
    assert lost[0]["host"] == f"127.0.0.1:{pg_cluster.port}" and lost[0]["error"]
    assert back[0]["refused"] == REFUSED and back[0]["down_s"] > 0
    assert not [e for e in logged if e["log_level"] == "error" and e is not lost[0]]
    refused = REGISTRY.get_sample_value("xnode_requests_rejected_total", labels)
    assert refused == counted + REFUSED
