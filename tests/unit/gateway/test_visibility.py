"""Which payloads of an answer the gateway waits for on every node: chain payloads only."""

from __future__ import annotations

from xmtp.identity.associations import signature_pb2
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.gateway.visibility import chain_points


def envelope(originator: int, sequence_id: int, chain: bool) -> bytes:
    unsigned = envelopes_pb2.UnsignedOriginatorEnvelope(
        originator_node_id=originator, originator_sequence_id=sequence_id
    ).SerializeToString()
    message = envelopes_pb2.OriginatorEnvelope(unsigned_originator_envelope=unsigned)
    if chain:
        message.blockchain_proof.transaction_hash = b"\x01" * 32
    else:
        message.originator_signature.CopyFrom(
            signature_pb2.RecoverableEcdsaSignature(bytes=b"\x00" * 65)
        )
    return message.SerializeToString()


def test_highest_chain_sequence_id_per_reserved_originator() -> None:
    answers = [
        envelope(100, 7, chain=False),
        envelope(1, 4, chain=True),
        envelope(0, 9, chain=True),
        envelope(1, 6, chain=True),
    ]
    assert chain_points(answers) == {1: 6, 0: 9}


def test_no_chain_payloads_nothing_to_wait_for() -> None:
    assert chain_points([envelope(200, 1, chain=False)]) == {}
