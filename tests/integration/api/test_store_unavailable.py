"""A node whose database refuses it answers every API UNAVAILABLE (retry later), with the one
message of the error mapping, and serves again once the database is back: the store's own
error (StoreUnavailable) crosses the layers, not the driver's."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest

from tests.conftest import NodeSpec, database_refusing, node_settings
from tests.waiting import eventually
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.client.node import NodeClient, group_message_envelope
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import build_payer_envelope
from xnode.devtools.postgres import PgCluster
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
        forks = forks_pb2_grpc.ForkApiStub(channel)  # type: ignore[no-untyped-call]
        logs = logs_pb2_grpc.LogApiStub(channel)  # type: ignore[no-untyped-call]
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
