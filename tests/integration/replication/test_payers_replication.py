"""Fees and limits between nodes (issue 11): a peer's forged fees are reported; a peer keeps
replicating while a client flood is refused."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc

from tests.conftest import Network
from tests.integration.replication.test_liveness_reports import wait_for_report
from tests.integration.replication.test_replication import stored
from tests.support.waiting import eventually
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.api.fees import FeesService
from xnode.client.node import NodeClient, group_message_envelope
from xnode.core import wire
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import (
    build_payer_envelope,
    originate,
    parse_originator_envelope,
    validate_payer_envelope,
)
from xnode.core.fees import Fees, FeeSchedule
from xnode_api.fees.v1 import fees_pb2_grpc

GROUP = bytes(range(16))
SCHEDULE = FeeSchedule(envelope_picodollars=1000, byte_day_picodollars=1)


def _envelopes_of_200(key: SigningKey) -> list[bytes]:
    """Sequence id 1 priced by the schedule, sequence id 2 with a forged (lower) base fee."""
    payer = SigningKey.generate()
    raws = []
    for sequence_id, forged in ((1, False), (2, True)):
        envelope = build_payer_envelope(group_message_envelope(GROUP, b"m"), payer, 200)
        valid = validate_payer_envelope(envelope, 200)
        base = SCHEDULE.base_fee(len(valid.raw), valid.retention_days) - (1 if forged else 0)
        now = time.time_ns()
        raws.append(originate(valid, 200, sequence_id, now, key, Fees(base, 0)).raw)
    return raws


async def serve_fake_200(address: str, raws: list[bytes]) -> grpc.aio.Server:
    """Node 200 as a peer sees it: its schedule, then its envelopes (only once the schedule
    was fetched, so the check cannot race the stream)."""
    fetched = asyncio.Event()

    class Fees(FeesService):
        async def GetFeeSchedule(self, request: Any, context: Any) -> Any:
            fetched.set()
            return await super().GetFeeSchedule(request, context)

    async def subscribe(request: bytes, context: Any) -> AsyncIterator[bytes]:
        asked = api.SubscribeOriginatorsRequest.FromString(request).filter.originator_node_ids
        if list(asked) != [200]:
            await asyncio.sleep(3600)  # asked to relay another node's envelopes: has none
        await fetched.wait()
        yield wire.field(1, wire.repeated(1, raws))
        await asyncio.sleep(3600)

    server = grpc.aio.server()
    handler = grpc.unary_stream_rpc_method_handler(
        subscribe, request_deserializer=bytes, response_serializer=bytes
    )
    server.add_generic_rpc_handlers(
        [
            grpc.method_handlers_generic_handler(
                "xmtp.xmtpv4.message_api.ReplicationApi", {"SubscribeOriginators": handler}
            )
        ]
    )
    fees_pb2_grpc.add_FeesApiServicer_to_server(Fees(200, SCHEDULE), server)
    server.add_insecure_port(address)
    await server.start()
    return server


async def test_an_envelope_with_forged_fees_is_reported_and_not_stored(
    start_node: Any, network: Network
) -> None:
    raws = _envelopes_of_200(network.spec.keys[200])
    fake = await serve_fake_200(network.addresses[200], raws)
    try:
        node = await start_node(**network.settings(100))
        report = await wait_for_report(node, mb.Misbehavior.MISBEHAVIOR_INVALID_PAYLOAD)
        # the envelope is the proof; the rule checked is in the logged detail
        assert [e.SerializeToString() for e in report.safety.envelopes] == [raws[1]]

        async def first_stored() -> bool:
            return await stored(node.address, 200) == [raws[0]]

        await eventually(first_stored)
    finally:
        await fake.stop(None)


async def test_a_peer_keeps_replicating_while_a_client_flood_is_refused(
    start_node: Any, network: Network
) -> None:
    tight = {
        "limit_subscribe_requests_per_second": 0.2,
        "limit_burst_seconds": 5,  # one new subscription per client
        "limit_query_requests_per_second": 0.2,
    }
    origin = await start_node(**network.settings(100, **tight))
    async with NodeClient(origin.address) as client:
        refused = 0
        for _ in range(20):
            try:
                await client.query(originators=[100])
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                refused += 1
        assert refused == 19
        peer = await start_node(**network.settings(200))
        sent = await client.publish_group_messages(SigningKey.generate(), 100, GROUP, [b"a", b"b"])

    async def replicated() -> bool:
        return len(await stored(peer.address, 100)) == 2

    await eventually(replicated)
    assert [parse_originator_envelope(r).sequence_id for r in await stored(peer.address, 100)] == [
        1,
        2,
    ]
    assert len(sent) == 2
