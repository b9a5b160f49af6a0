"""Node tokens against an `xnode run` process whose registry is the chain's NodeRegistry."""

from __future__ import annotations

import time

import grpc

from tests.e2e.replication.conftest import ChainNetwork
from tests.support.waiting import eventually_value
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
    disabled = issue_token(keys[300], 300, 100, now)

    async def refused_for(token: str) -> str | None:
        """The refusal's details; None while the stream is accepted."""
        try:
            await open_stream(address, token)
        except grpc.aio.AioRpcError as err:
            assert err.code() == grpc.StatusCode.UNAUTHENTICATED, err
            return err.details() or ""
        return None

    # The node follows the registry's events: refused once it has seen node 300 disabled.
    details = await eventually_value(lambda: refused_for(disabled), lambda d: d is not None)
    assert "node 300 is disabled" in (details or ""), details
    for reason, token in refused.items():
        details = await refused_for(token)
        assert details is not None and reason in details, (reason, details)
