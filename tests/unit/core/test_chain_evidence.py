"""BLOCKCHAIN_INCONSISTENCY evidence: a chain payload a node vouched for, checked against the
transaction it names; re-orgs and unknown transactions convict nobody."""

from __future__ import annotations

from eth_abi.abi import encode

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.client.node import group_message_envelope
from xnode.core import misbehavior
from xnode.core.chain_evidence import TxOutcome, transactions_named
from xnode.core.chain_logs import MESSAGE_SENT, receipt_outcome
from xnode.core.chain_payloads import ChainEvent, build_chain_payload
from xnode.core.crypto import SigningKey
from xnode.core.evidence import why_unproven

KEY = SigningKey.generate()
OTHER = SigningKey.generate()
KEYS = {100: [KEY.public_key], 200: [OTHER.public_key]}
GROUP = bytes(range(16))
TX = bytes([7]) * 32
BLOCK_TIME = 1_800_000_000


def event(text: bytes = b"on chain", sequence_id: int = 3, block: int = 10) -> ChainEvent:
    payload = group_message_envelope(GROUP, text).SerializeToString()
    return ChainEvent(0, sequence_id, GROUP, payload, block, bytes(32), TX, 0)


def served(chain_event: ChainEvent, key: SigningKey = KEY, stamp: int = BLOCK_TIME) -> bytes:
    return build_chain_payload(chain_event, stamp, key).raw


def claim(*envelopes: bytes, node: int = 100) -> str | None:
    report = misbehavior.safety_report(misbehavior.BLOCKCHAIN_INCONSISTENCY, node, envelopes, 1)
    return why_unproven(report, KEYS, {TX: TxOutcome(True, (event(),))})


def test_a_payload_the_transaction_did_not_carry_proves_an_inconsistency() -> None:
    doctored = served(event(b"doctored"))
    assert claim(doctored) is None
    assert transactions_named([envelopes_pb2.OriginatorEnvelope.FromString(doctored)]) == [TX]


def test_the_chains_own_payload_proves_nothing_even_after_a_reorg() -> None:
    assert "carries this payload" in (claim(served(event())) or "")
    moved = served(event(sequence_id=9, block=12), stamp=BLOCK_TIME + 24)
    assert "carries this payload" in (claim(moved) or "")


def test_unknown_or_reverted_transactions_prove_nothing() -> None:
    report = misbehavior.safety_report(
        misbehavior.BLOCKCHAIN_INCONSISTENCY, 100, [served(event(b"doctored"))], 1
    )
    assert "is not on the chain" in (why_unproven(report, KEYS, {}) or "")
    reverted = {TX: TxOutcome(False, ())}
    assert "reverted" in (why_unproven(report, KEYS, reverted) or "")


def test_another_nodes_signature_or_tampering_proves_nothing() -> None:
    assert "not signed by the accused" in (claim(served(event(b"doctored"), OTHER)) or "")
    envelope = envelopes_pb2.OriginatorEnvelope.FromString(served(event()))
    unsigned = envelopes_pb2.UnsignedOriginatorEnvelope.FromString(
        envelope.unsigned_originator_envelope
    )
    unsigned.payer_envelope_bytes = envelopes_pb2.PayerEnvelope(
        unsigned_client_envelope=group_message_envelope(GROUP, b"forged").SerializeToString()
    ).SerializeToString()
    envelope.unsigned_originator_envelope = unsigned.SerializeToString()
    assert "not signed by the accused" in (claim(envelope.SerializeToString()) or "")


def test_an_originators_envelope_is_no_chain_payload() -> None:
    envelope = envelopes_pb2.OriginatorEnvelope.FromString(served(event(b"doctored")))
    envelope.ClearField("blockchain_proof")
    assert "carries no blockchain proof" in (claim(envelope.SerializeToString()) or "")


def _log(address: str, payload: bytes) -> dict[str, object]:
    data = encode(["bytes"], [payload])
    return {
        "address": address,
        "topics": ["0x" + t.hex() for t in (MESSAGE_SENT, GROUP + bytes(16), (3).to_bytes(32))],
        "data": "0x" + data.hex(),
        "blockNumber": "0xa",
        "blockHash": "0x" + bytes(32).hex(),
        "transactionHash": "0x" + TX.hex(),
        "logIndex": "0x0",
    }


def test_a_receipt_counts_only_the_payload_contracts_logs() -> None:
    contract, impostor = "0x" + "11" * 20, "0x" + "22" * 20
    payload = event().payload
    receipt = {"status": "0x1", "logs": [_log(impostor, b"look-alike"), _log(contract, payload)]}
    outcome = receipt_outcome(receipt, {contract})
    assert outcome is not None and outcome.succeeded
    assert [e.payload for e in outcome.events] == [payload]
    assert receipt_outcome({"status": "0x0", "logs": []}, {contract}) == TxOutcome(False, ())
    assert receipt_outcome(None, {contract}) is None
