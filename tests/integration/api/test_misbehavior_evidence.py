"""CAUSAL_ORDERING and BLOCKCHAIN_INCONSISTENCY reports through MisbehaviorApi, on a real node,
Postgres and anvil: taken when their evidence verifies, refused with the reason otherwise."""

from __future__ import annotations

import time
from typing import Any

import grpc
import pytest

from tests.conftest import ChainEnv, Network, NodeSpec, node_settings
from tests.integration.chain.helpers import commit_envelope, publish
from tests.support.withholding_log import CommittedLog, leaving_out
from xmtp.identity.associations import signature_pb2
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.client.node import NodeClient, group_message_envelope
from xnode.core import misbehavior
from xnode.core.crypto import SigningKey, blockchain_proof_digest
from xnode.core.cursors import Cursor
from xnode.core.envelopes import build_payer_envelope, originate, validate_payer_envelope
from xnode.core.withholding import accusation_report, withholding_report

GROUP = bytes(range(16))


def client_report(kind: int, node: int, *envelopes: bytes) -> mb.UnsignedMisbehaviorReport:
    report = misbehavior.safety_report(kind, node, list(envelopes), time.time_ns())
    report.submitted_by_node = False
    return report


async def refused(client: NodeClient, report: mb.UnsignedMisbehaviorReport) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.submit_misbehavior_report(report)
    return err.value


async def taken(client: NodeClient) -> list[tuple[int, int]]:
    """(type, accused) of the client reports the node hosts (its own liveness reports of the
    peers that are down aside)."""
    answer = await client.misbehavior.QueryMisbehaviorReports(mb.QueryMisbehaviorReportsRequest())
    reports = [
        mb.UnsignedMisbehaviorReport.FromString(r.unsigned_misbehavior_report)
        for r in answer.reports
    ]
    return [(r.type, r.misbehaving_node_id) for r in reports if not r.submitted_by_node]


def originated(key: SigningKey, node: int, seq: int, depends_on: dict[int, int]) -> bytes:
    client = group_message_envelope(GROUP, b"m", Cursor(depends_on))
    payer = build_payer_envelope(client, SigningKey.generate(), node)
    return originate(validate_payer_envelope(payer, node), node, seq, time.time_ns(), key).raw


def resigned(envelope: envelopes_pb2.OriginatorEnvelope, key: SigningKey, text: bytes) -> bytes:
    """The chain payload with other content, vouched for by `key` at the same transaction."""
    unsigned = envelopes_pb2.UnsignedOriginatorEnvelope.FromString(
        envelope.unsigned_originator_envelope
    )
    payer = build_payer_envelope(commit_envelope(GROUP, body=text), SigningKey.generate(), 0)
    unsigned.payer_envelope_bytes = payer.SerializeToString()
    raw = unsigned.SerializeToString()
    tx = envelope.blockchain_proof.transaction_hash
    signature = key.sign(blockchain_proof_digest(raw, tx))
    return envelopes_pb2.OriginatorEnvelope(
        unsigned_originator_envelope=raw,
        blockchain_proof=envelopes_pb2.BlockchainProof(
            transaction_hash=tx,
            node_signature=signature_pb2.RecoverableEcdsaSignature(bytes=signature),
        ),
    ).SerializeToString()


async def test_causal_ordering_is_taken_with_proof_and_refused_without(
    start_node: Any, network: Network
) -> None:
    node = await start_node(**network.settings(100))
    key = network.spec.keys[200]
    kind = misbehavior.CAUSAL_ORDERING
    async with NodeClient(node.address) as client:
        honest = client_report(kind, 200, originated(key, 200, 5, {200: 4, 300: 70}))
        error = await refused(client, honest)
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "no envelope depends on the accused's own" in (error.details() or "")
        proof = client_report(kind, 200, originated(key, 200, 5, {200: 5}))
        await client.submit_misbehavior_report(proof)
        assert await taken(client) == [(kind, 200)]
        chain_claim = client_report(
            misbehavior.BLOCKCHAIN_INCONSISTENCY, 200, proof.safety.envelopes[0].SerializeToString()
        )
        error = await refused(client, chain_claim)
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "this node reads no chain" in (error.details() or "")


async def test_blockchain_inconsistency_is_checked_against_the_chain(
    start_node: Any, database: str, node_spec: NodeSpec, chain_env: ChainEnv
) -> None:
    chain_env.register(node_spec)
    node = await start_node(**node_settings(database, node_spec, **chain_env.settings()))
    kind = misbehavior.BLOCKCHAIN_INCONSISTENCY
    async with NodeClient(node.address) as client:
        (indexed,) = await publish(client, 100, [commit_envelope(GROUP)])
        honest = client_report(kind, 100, indexed.SerializeToString())
        error = await refused(client, honest)
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "carries this payload" in (error.details() or "")

        doctored = resigned(indexed, node_spec.keys[200], b"doctored")
        error = await refused(client, client_report(kind, 300, doctored))
        assert "not signed by the accused's registry key" in (error.details() or "")
        unknown = envelopes_pb2.OriginatorEnvelope.FromString(doctored)
        unknown.blockchain_proof.transaction_hash = bytes(32)
        invented = resigned(unknown, node_spec.keys[200], b"invented")
        error = await refused(client, client_report(kind, 200, invented))
        assert "is not on the chain" in (error.details() or "")

        await client.submit_misbehavior_report(client_report(kind, 200, doctored))
        assert await taken(client) == [(kind, 200)]

        chain_env.anvil.stop()  # the chain cannot be asked: come back later, not "invalid"
        error = await refused(client, client_report(kind, 200, doctored))
        assert error.code() == grpc.StatusCode.UNAVAILABLE
        assert "cannot read the chain now" in (error.details() or "")


async def test_withholding_is_taken_with_proof_and_accusations_are_refused(
    start_node: Any, network: Network
) -> None:
    node = await start_node(**network.settings(100))
    accused = CommittedLog(network.spec.keys[200], 200, 4, time.time_ns())
    lie = accused.holdings(leaving_out(accused, 2))

    def from_client(report: mb.UnsignedMisbehaviorReport) -> mb.UnsignedMisbehaviorReport:
        report.submitted_by_node = False
        return report

    async with NodeClient(node.address) as client:
        honest = withholding_report(200, accused.commitment(2), accused.holdings(), 1)
        error = await refused(client, from_client(honest))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "sequence id 2 was served" in (error.details() or "")
        accusation = accusation_report(200, accused.commitment(2), "UNAVAILABLE", 1, 1)
        error = await refused(client, from_client(accusation))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "only nodes file one" in (error.details() or "")
        proof = from_client(withholding_report(200, accused.commitment(2), lie, 1))
        await client.submit_misbehavior_report(proof)
        assert await taken(client) == [(misbehavior.WITHHOLDING, 200)]
