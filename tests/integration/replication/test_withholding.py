"""Withholding (xnode.core.withholding) on real nodes and Postgres: originator 100 lost one of
its envelopes (held nowhere else) and node 300, new, repairs 100's log from 100 itself. The
honest 100 answers UNAVAILABLE while it cannot account for the envelope, and 300 files
nothing. Behind a proxy that answers HoldingsApi with a signed account leaving the envelope
out, 100 is reported by 300, and the report verifies offline with the council job's check."""

from __future__ import annotations

import time
from typing import Any

import grpc
import pytest

from spark_jobs.misbehavior_aggregation import verify_report
from tests.conftest import Network
from tests.fake_peer import serve_proxy
from tests.integration.export.helpers import Item, group, publish
from tests.integration.logs.helpers import checkpoint_at, log_api
from tests.integration.replication.test_losses import FAST, _delete_envelopes
from tests.integration.replication.test_replication import metric, stored
from tests.waiting import eventually, eventually_value
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.client.node import NodeClient
from xnode.core.misbehavior import WITHHOLDING, WITHHOLDING_ACCUSATION
from xnode.core.topics import TopicKind
from xnode.core.withholding import sign_holdings
from xnode.devtools.postgres import free_port
from xnode_api.withholding.v1 import withholding_pb2 as wh
from xnode_api.withholding.v1 import withholding_pb2_grpc

GROUP = Item(TopicKind.GROUP_MESSAGES, group(9))
SIZE = 30
S = 12  # the envelope originator 100 lost
HOLDINGS = "/xnode.withholding.v1.HoldingsApi/GetSignedHoldings"


async def _lost_at_originator(
    network: Network, start_node: Any, address: str
) -> tuple[Any, list[bytes]]:
    """Node 100 listening at `address`, SIZE envelopes published and checkpointed, then
    envelope S deleted from its database (its leaf stays) and 100 restarted."""
    settings = {**network.settings(100, **FAST), "listen_address": address}
    node = await start_node(**settings)
    sent = await publish(node.address, 100, [GROUP] * SIZE)
    async with log_api(node.address) as api:
        await checkpoint_at(api, 100, network.spec.keys[100].public_key, SIZE)
    await node.stop()
    assert await _delete_envelopes(network.dsns[100], 100, S, S) == 1
    return await start_node(**settings), sent


async def _repaired_without_s(network: Network, start_node: Any, sent: list[bytes]) -> Any:
    """Node 300, new: holds all of 100's envelopes but S, and has passed S unserved in a
    repair of 100's log."""
    expired = metric("xnode_repair_envelopes_total", originator="100", outcome="expired")
    node = await start_node(**network.settings(300, **FAST))
    others = [raw for i, raw in enumerate(sent, 1) if i != S]

    async def holds_the_rest() -> bool:
        return await stored(node.address, 100) == others

    await eventually(holds_the_rest, what="300 holds 100's envelopes but S")

    def passed_s() -> bool:
        now = metric("xnode_repair_envelopes_total", originator="100", outcome="expired")
        return now > expired

    await eventually(passed_s, what="a repair of 100's log from 100 passed S unserved")
    return node


async def _reports(address: str) -> list[tuple[int, int, bytes]]:
    """(type, accused, exported report bytes) of every report the node hosts."""
    async with NodeClient(address) as client:
        answer = await client.misbehavior.QueryMisbehaviorReports(
            mb.QueryMisbehaviorReportsRequest()
        )
    out = []
    for report in answer.reports:
        unsigned = mb.UnsignedMisbehaviorReport.FromString(report.unsigned_misbehavior_report)
        out.append((int(unsigned.type), unsigned.misbehaving_node_id, report.SerializeToString()))
    return out


async def test_an_honest_originator_that_lost_an_envelope_is_not_reported(
    start_node: Any, network: Network
) -> None:
    originator, sent = await _lost_at_originator(network, start_node, network.addresses[100])
    node = await _repaired_without_s(network, start_node, sent)
    async with grpc.aio.insecure_channel(originator.address) as channel:
        api = withholding_pb2_grpc.HoldingsApiStub(channel)  # type: ignore[no-untyped-call]
        with pytest.raises(grpc.aio.AioRpcError) as healing:
            await api.GetSignedHoldings(
                wh.GetSignedHoldingsRequest(originator_node_id=100, first=1, last=SIZE)
            )
        assert healing.value.code() == grpc.StatusCode.UNAVAILABLE
        assert f"sequence ids [{S}] are being repaired" in (healing.value.details() or "")
        whole = await api.GetSignedHoldings(
            wh.GetSignedHoldingsRequest(originator_node_id=100, first=S + 1, last=SIZE + 5)
        )
        account = wh.UnsignedHoldings.FromString(whole.holdings.unsigned_holdings)
        assert list(account.envelopes) == sent[S:] and account.log_size == SIZE
    kinds = {WITHHOLDING, WITHHOLDING_ACCUSATION}
    assert [r for r in await _reports(node.address) if r[0] in kinds] == []


async def test_a_signed_account_leaving_out_a_committed_envelope_is_reported(
    start_node: Any, network: Network
) -> None:
    real = f"127.0.0.1:{free_port()}"
    originator, sent = await _lost_at_originator(network, start_node, real)
    key = network.spec.keys[100]

    async def lie(request: bytes, context: Any) -> bytes:
        asked = wh.GetSignedHoldingsRequest.FromString(request)
        served = range(asked.first, min(asked.last, SIZE) + 1)
        account = wh.UnsignedHoldings(
            originator_node_id=100,
            first=asked.first,
            last=asked.last,
            log_size=SIZE,
            answered_ns=time.time_ns(),
            envelopes=[sent[s - 1] for s in served if s != S],
        )
        signed = sign_holdings(key, account)
        return wh.GetSignedHoldingsResponse(holdings=signed).SerializeToString()

    handler = grpc.unary_unary_rpc_method_handler(lie)
    proxy = await serve_proxy(real, network.addresses[100], {HOLDINGS: handler})
    try:
        node = await _repaired_without_s(network, start_node, sent)

        async def withholding() -> list[tuple[int, int, bytes]]:
            return [r for r in await _reports(node.address) if r[0] == WITHHOLDING]

        found = await eventually_value(withholding, bool, what="a WITHHOLDING report")
    finally:
        await proxy.stop(None)
    assert [(kind, accused) for kind, accused, _ in found] == [(WITHHOLDING, 100)]
    registry = {n: frozenset({k.public_key}) for n, k in network.spec.keys.items()}
    checked = verify_report(found[0][2], registry)
    assert checked["proof_error"] is None
    assert checked["host_signer"] == network.spec.keys[300].public_key
    assert originator.address == real
