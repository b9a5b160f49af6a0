"""Node tokens against an `xnode run` process whose registry is the chain's NodeRegistry."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from tests.e2e.replication.conftest import ChainNetwork
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xnode.core.crypto import SigningKey
from xnode.core.node_tokens import issue_token

METHOD = "/xmtp.xmtpv4.message_api.ReplicationApi/SubscribeOriginators"


async def open_stream(address: str, token: str) -> None:
    request = api.SubscribeOriginatorsRequest(
        filter=api.SubscribeOriginatorsRequest.OriginatorFilter(originator_node_ids=[100])
    )
    async with grpc.aio.insecure_channel(address) as channel:
        call = channel.unary_stream(
            METHOD,
            request_serializer=api.SubscribeOriginatorsRequest.SerializeToString,
            response_deserializer=bytes,
        )(request, metadata=(("node-authorization", token),), timeout=10)
        await call.__aiter__().__anext__()  # the caught-up marker: the stream was accepted
        call.cancel()


async def test_expired_wrong_audience_unregistered_and_disabled_tokens_are_refused(
    chain_network: ChainNetwork,
) -> None:
    chain_network.start(100)
    address, keys, now = chain_network.addresses[100], chain_network.spec.keys, int(time.time())
    await open_stream(address, issue_token(keys[200], 200, 100, now))
    refused = {
        "token expired": issue_token(keys[200], 200, 100, now - 7200),
        "audience is not this node (100)": issue_token(keys[200], 200, 300, now),
        "node 700 is not registered": issue_token(SigningKey.generate(), 700, 100, now),
    }
    chain_network.set_enabled(300, False)
    refused["node 300 is disabled"] = issue_token(keys[300], 300, 100, now)
    await asyncio.sleep(1.0)  # the node follows the registry's events
    for reason, token in refused.items():
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await open_stream(address, token)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED, reason
        assert reason in (err.value.details() or ""), err.value.details()
