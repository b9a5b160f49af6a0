"""Withholding (xnode.core.withholding) on real nodes and Postgres: originator 100 lost one of
its envelopes (held nowhere else) and node 300, new, repairs 100's log from 100 itself. The
honest 100 answers UNAVAILABLE while it cannot account for the envelope, and 300 files
nothing. Behind a proxy that answers HoldingsApi with a signed account leaving the envelope
out, 100 is reported by 300, and the report verifies offline with the council job's check.

Losses go the same way: an envelope node 100 held and lost (withdrawn by the scrub, or its
row gone), which its originator, the scripted node 500 (xnode.devtools.byzantine), no longer
serves: signed holdings leaving it out are a WITHHOLDING report, holdings never signed a
WITHHOLDING_ACCUSATION once `withholding_patience_seconds` has passed."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest

from spark_jobs.misbehavior_aggregation import verify_report
from tests.conftest import REPLICATION_TEST_SETTINGS, Network, NodeSpec, node_settings
from tests.integration.export.helpers import Item, group, publish
from tests.integration.logs.helpers import checkpoint_at, log_api
from tests.integration.replication.test_losses import FAST, _delete_envelopes
from tests.integration.replication.test_replication import metric, stored
from tests.integration.replication.test_scrub import SCRUBBING, _flip_bytes
from tests.support.fake_peer import serve_proxy
from tests.support.waiting import eventually, eventually_value
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.client.node import NodeClient
from xnode.core.crypto import SigningKey, keccak256
from xnode.core.leaves import content_hash_of
from xnode.core.misbehavior import WITHHOLDING, WITHHOLDING_ACCUSATION
from xnode.core.topics import TopicKind
from xnode.core.withholding import check_commitment, extended, sign_holdings, why_not_withheld
from xnode.devtools.byzantine import peer
from xnode.devtools.byzantine.committed import CommittedLog
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


Reports = list[tuple[int, int, bytes]]  # (type, accused, exported report bytes)


@asynccontextmanager
async def withholder(
    directory: Path, script: peer.Script
) -> AsyncIterator[tuple[NodeSpec, peer.Behavior, dict[int, str]]]:
    """Node 500, a MisbehavingPeer with a committed log behaving as `script` says, serving
    in a registry of nodes 100 and 500 alone; stopped after."""
    spec = NodeSpec(directory, {n: SigningKey.generate() for n in (100, 500)})
    addresses = {n: f"127.0.0.1:{free_port()}" for n in spec.keys}
    spec.write(addresses)
    behavior = script(peer.Originator(500, spec.keys[500]))
    assert behavior.log is not None, "the script serves no committed log"
    server = peer.MisbehavingPeer(500, behavior)
    await server.start(addresses[500])
    try:
        yield spec, behavior, addresses
    finally:
        await server.stop()


@asynccontextmanager
async def beside_withholder(
    start_node: Any, dsn: str, directory: Path, script: peer.Script, **settings: Any
) -> AsyncIterator[tuple[Any, CommittedLog, NodeSpec]]:
    """Node 100 (`settings` beyond FAST) running beside the `withholder`, once it holds
    every envelope 500 served on its stream."""
    async with withholder(directory, script) as (spec, behavior, addresses):
        assert behavior.log is not None
        options = {**REPLICATION_TEST_SETTINGS, **FAST, **settings}
        node = await start_node(
            **node_settings(dsn, spec, 100, listen_address=addresses[100], **options)
        )

        async def holds_what_was_streamed() -> bool:
            return await stored(node.address, 500) == behavior.streams[0]

        await eventually(holds_what_was_streamed, what="100 holds what 500 streamed")
        yield node, behavior.log, spec


async def filed(address: str, kind: int) -> Reports:
    """Waits for the node to host a report of `kind`; returns those it hosts."""

    async def of_kind() -> Reports:
        return [r for r in await _reports(address) if r[0] == kind]

    return await eventually_value(of_kind, bool, what=f"a report of type {kind}")


def extension(exported: bytes) -> wh.ExtendedMisbehaviorReport:
    report = mb.MisbehaviorReport.FromString(exported)
    return extended(mb.UnsignedMisbehaviorReport.FromString(report.unsigned_misbehavior_report))


def proves_withholding(found: Reports, log: CommittedLog, spec: NodeSpec) -> None:
    """One WITHHOLDING report, against node 500, with a proof anyone can check offline."""
    assert [(kind, accused) for kind, accused, _ in found] == [(WITHHOLDING, 500)]
    proof = extension(found[0][2]).withholding
    assert proof.commitment.sequence_id == peer.WITHHELD
    assert proof.commitment.checkpoint == log.checkpoint.signed
    registry = {n: frozenset({k.public_key}) for n, k in spec.keys.items()}
    assert why_not_withheld(proof, 500, registry) is None
    checked = verify_report(found[0][2], registry)
    assert checked["proof_error"] is None
    assert checked["host_signer"] == spec.keys[100].public_key


async def test_an_honest_originator_that_lost_an_envelope_is_not_reported(
    start_node: Any, network: Network
) -> None:
    originator, sent = await _lost_at_originator(network, start_node, network.addresses[100])
    node = await _repaired_without_s(network, start_node, sent)
    async with grpc.aio.insecure_channel(originator.address) as channel:
        api = withholding_pb2_grpc.HoldingsApiStub(channel)
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
    # Each leaf's opening is kept beside it, by its originator (S's too, its envelope gone)
    # and by the node that replicated it.
    openings = {s: content_hash_of(raw) for s, raw in enumerate(sent, 1)}
    assert await _openings(network.dsns[100]) == openings
    assert await _openings(network.dsns[300]) == {s: h for s, h in openings.items() if s != S}


async def _openings(dsn: str) -> dict[int, bytes]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT sequence_id, content_hash FROM log_leaves WHERE originator_node_id = 100"
        )
    finally:
        await conn.close()
    return {r[0]: bytes(r[1]) for r in rows}


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
            question_hash=keccak256(asked.question.unsigned_question),  # the asker's time
        )
        signed = sign_holdings(key, account)
        return wh.GetSignedHoldingsResponse(holdings=signed).SerializeToString()

    handler: grpc.RpcMethodHandler[bytes, bytes] = grpc.unary_unary_rpc_method_handler(lie)
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


def streamed_then_withheld(accounts: bool) -> peer.Script:
    """Node 500 streams its whole log, then never serves WITHHELD again (QueryEnvelopes,
    repair) and leaves it out of the holdings it signs, or (`accounts` False) signs none."""

    def script(o: peer.Originator) -> peer.Behavior:
        log = peer.committed_log(o, accounts)
        return peer.Behavior([log.raws], log=log)

    return script


async def test_a_loss_the_scrub_finds_and_its_originator_withholds_is_reported(
    start_node: Any, database: str, tmp_path: Path
) -> None:
    script = streamed_then_withheld(accounts=True)
    async with beside_withholder(start_node, database, tmp_path, script, **SCRUBBING) as (
        node,
        log,
        spec,
    ):
        [bad] = await _flip_bytes(database, ((peer.WITHHELD, 20),), originator=500)
        found = await filed(node.address, WITHHOLDING)
        assert bad not in await stored(node.address, 500)  # withdrawn, not served
    proves_withholding(found, log, spec)


async def test_a_loss_its_originator_never_accounts_for_is_an_accusation(
    start_node: Any, database: str, tmp_path: Path
) -> None:
    script = streamed_then_withheld(accounts=False)
    patience = {"withholding_patience_seconds": 0.0}
    async with beside_withholder(start_node, database, tmp_path, script, **patience) as (
        node,
        _,
        spec,
    ):
        assert await _delete_envelopes(database, 500, peer.WITHHELD, peer.WITHHELD) == 1
        found = await filed(node.address, WITHHOLDING_ACCUSATION)
        kinds = [kind for kind, _, _ in await _reports(node.address)]
    assert [(kind, accused) for kind, accused, _ in found] == [(WITHHOLDING_ACCUSATION, 500)]
    assert WITHHOLDING not in kinds
    accusation = extension(found[0][2]).withholding_accusation
    opened = check_commitment(accusation.commitment, 500, {spec.keys[500].public_key})
    assert opened.sequence_id == peer.WITHHELD
    assert accusation.answer.startswith("UNAVAILABLE")
