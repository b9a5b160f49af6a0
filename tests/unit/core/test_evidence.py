"""Safety reports that prove themselves, and those that do not (issue 9 part 5)."""

from __future__ import annotations

import time

import pytest

from xmtp.identity.associations import signature_pb2
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.client.node import group_message_envelope
from xnode.core import misbehavior
from xnode.core.crypto import SigningKey, originator_digest
from xnode.core.cursors import Cursor
from xnode.core.envelopes import build_payer_envelope
from xnode.core.evidence import check_claim, payer_rule_broken, why_unproven

KEY = SigningKey.generate()
STRANGER = SigningKey.generate()
PAYER = SigningKey.generate()
KEYS = {100: [KEY.public_key], 200: [STRANGER.public_key]}
NOW = time.time_ns()


def signed(
    seq: int,
    ns: int = NOW,
    text: bytes = b"hi",
    key: SigningKey = KEY,
    target: int = 100,
    depends_on: dict[int, int] | None = None,
) -> bytes:
    client = group_message_envelope(bytes(16), text, Cursor(depends_on or {}))
    payer = build_payer_envelope(client, PAYER, target)
    unsigned = envelopes_pb2.UnsignedOriginatorEnvelope(
        originator_node_id=100,
        originator_sequence_id=seq,
        originator_ns=ns,
        payer_envelope_bytes=payer.SerializeToString(),
    ).SerializeToString()
    return envelopes_pb2.OriginatorEnvelope(
        unsigned_originator_envelope=unsigned,
        originator_signature=signature_pb2.RecoverableEcdsaSignature(
            bytes=key.sign(originator_digest(unsigned))
        ),
    ).SerializeToString()


def unsigned_copy(raw: bytes) -> bytes:
    envelope = envelopes_pb2.OriginatorEnvelope.FromString(raw)
    envelope.ClearField("originator_signature")
    return envelope.SerializeToString()


def report(kind: int, *envelopes: bytes, node: int = 100) -> mb.UnsignedMisbehaviorReport:
    return misbehavior.safety_report(kind, node, list(envelopes), NOW)


def test_a_fork_proves_a_duplicate_sequence_id() -> None:
    fork = report(misbehavior.DUPLICATE_SEQUENCE_ID, signed(5, text=b"a"), signed(5, text=b"b"))
    assert why_unproven(fork, KEYS) is None


@pytest.mark.parametrize(
    ("envelopes", "failure"),
    [
        ((signed(5), signed(6)), "no two envelopes with one sequence id"),
        ((signed(5), signed(5)), "no two envelopes with one sequence id"),
        ((signed(5, text=b"a"), signed(5, text=b"b", key=STRANGER)), "envelope 1: not signed"),
        ((signed(5, text=b"a"), unsigned_copy(signed(5, text=b"b"))), "envelope 1: carries no"),
    ],
    ids=["two honest envelopes", "the same envelope twice", "one forged", "one unsigned"],
)
def test_honest_or_forged_envelopes_prove_no_fork(
    envelopes: tuple[bytes, ...], failure: str
) -> None:
    claim = report(misbehavior.DUPLICATE_SEQUENCE_ID, *envelopes)
    assert failure in (why_unproven(claim, KEYS) or "")


def test_a_fork_of_node_100_does_not_accuse_node_200() -> None:
    fork = report(
        misbehavior.DUPLICATE_SEQUENCE_ID, signed(5, text=b"a"), signed(5, text=b"b"), node=200
    )
    assert "originated by node 100, not the accused 200" in (why_unproven(fork, KEYS) or "")
    assert "has no registry key" in (why_unproven(fork, {}) or "")


def test_out_of_order_needs_timestamps_that_go_back() -> None:
    back = report(misbehavior.OUT_OF_ORDER, signed(7, ns=NOW), signed(8, ns=NOW - 1))
    assert why_unproven(back, KEYS) is None
    gap = report(misbehavior.OUT_OF_ORDER, signed(7, ns=NOW), signed(9, ns=NOW + 1))
    assert "a sequence gap alone proves nothing" in (why_unproven(gap, KEYS) or "")
    single = report(misbehavior.OUT_OF_ORDER, signed(3))
    assert why_unproven(single, KEYS) is not None


def test_invalid_payload_names_the_payer_envelope_rule() -> None:
    wrong_target = signed(4, target=300)
    broken = payer_rule_broken(_payer_bytes(wrong_target), 100, NOW)
    assert broken is not None and "wrong_originator" in broken.describe()
    assert (broken.rule, broken.standing, broken.epoch) == ("xip49-target-originator", "shared", 1)
    assert why_unproven(report(misbehavior.INVALID_PAYLOAD, wrong_target), KEYS) is None
    honest = report(misbehavior.INVALID_PAYLOAD, signed(4))
    assert "every envelope passes the payer-envelope rule" in (why_unproven(honest, KEYS) or "")


def test_a_dependency_on_the_originators_own_future_proves_causal_ordering() -> None:
    ahead = report(misbehavior.CAUSAL_ORDERING, signed(4, depends_on={100: 4, 200: 9}))
    assert why_unproven(ahead, KEYS) is None
    later = report(misbehavior.CAUSAL_ORDERING, signed(4), signed(5, depends_on={100: 7}))
    assert why_unproven(later, KEYS) is None


@pytest.mark.parametrize(
    ("envelopes", "failure"),
    [
        ((signed(4, depends_on={100: 3}),), "no envelope depends on the accused's own"),
        ((signed(4, depends_on={200: 90}),), "through other originators does not show"),
        ((signed(4, depends_on={100: 4}, key=STRANGER),), "envelope 0: not signed by node 100"),
        ((unsigned_copy(signed(4, depends_on={100: 9})),), "envelope 0: carries no"),
    ],
    ids=["what it had seen", "another originator's", "forged", "unsigned"],
)
def test_honest_dependencies_or_forged_envelopes_prove_no_causal_ordering(
    envelopes: tuple[bytes, ...], failure: str
) -> None:
    claim = report(misbehavior.CAUSAL_ORDERING, *envelopes)
    assert failure in (why_unproven(claim, KEYS) or "")


def test_tampering_with_a_causal_ordering_proof_breaks_it() -> None:
    envelope = envelopes_pb2.OriginatorEnvelope.FromString(signed(4, depends_on={100: 4}))
    unsigned = envelopes_pb2.UnsignedOriginatorEnvelope.FromString(
        envelope.unsigned_originator_envelope
    )
    unsigned.originator_sequence_id = 5  # as if the dependency were one the node had seen
    envelope.unsigned_originator_envelope = unsigned.SerializeToString()
    claim = report(misbehavior.CAUSAL_ORDERING, envelope.SerializeToString())
    assert "envelope 0: not signed by node 100" in (why_unproven(claim, KEYS) or "")


def test_chain_claims_need_the_chain_and_liveness_proves_nothing() -> None:
    chain = report(misbehavior.BLOCKCHAIN_INCONSISTENCY, signed(1))
    assert "checked against the chain" in (why_unproven(chain, KEYS) or "")
    assert "carries no blockchain proof" in (why_unproven(chain, KEYS, {}) or "")
    liveness = mb.UnsignedMisbehaviorReport(
        misbehaving_node_id=100,
        type=misbehavior.UNRESPONSIVE_NODE,
        liveness=mb.LivenessFailure(response_time_ns=1),
    )
    with pytest.raises(Exception, match="only safety reports do"):
        check_claim(liveness, KEYS)


def _payer_bytes(raw: bytes) -> bytes:
    envelope = envelopes_pb2.OriginatorEnvelope.FromString(raw)
    unsigned = envelopes_pb2.UnsignedOriginatorEnvelope.FromString(
        envelope.unsigned_originator_envelope
    )
    return unsigned.payer_envelope_bytes
