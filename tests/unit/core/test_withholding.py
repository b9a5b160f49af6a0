from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.client.node import group_message_envelope
from xnode.core import merkle
from xnode.core.checkpoints import sign_checkpoint
from xnode.core.constants import NS_PER_SECOND
from xnode.core.crypto import SigningKey, keccak256
from xnode.core.envelopes import build_payer_envelope, originate, validate_payer_envelope
from xnode.core.evidence import why_unproven
from xnode.core.leaves import HeldLeaf, envelope_leaf, signed_content
from xnode.core.misbehavior import sign_report, type_name
from xnode.core.withholding import (
    WITHHOLDING,
    Healing,
    account,
    accusation_report,
    extended,
    sign_holdings,
    withholding_report,
)
from xnode_api.withholding.v1 import withholding_pb2 as wh

KEY = SigningKey.generate()
OTHER = SigningKey.generate()
PAYER = SigningKey.generate()
HOST = SigningKey.generate()
NODE = 100
KEYS = {NODE: [KEY.public_key], 200: [OTHER.public_key]}
NOW_NS = time.time_ns()
DAY_NS = 86_400 * NS_PER_SECOND
SIZE = 6
S = 4  # the sequence id withheld


def envelope(sequence_id: int, key: SigningKey = KEY) -> bytes:
    client = group_message_envelope(b"g" * 16, b"m%d" % sequence_id)
    payer = validate_payer_envelope(build_payer_envelope(client, PAYER, NODE), NODE)
    return originate(payer, NODE, sequence_id, NOW_NS - DAY_NS + sequence_id, key).raw


RAWS = {s: envelope(s) for s in range(1, SIZE + 1)}
LEAVES = [envelope_leaf(RAWS[s]) for s in range(1, SIZE + 1)]
EXPIRY = signed_content(RAWS[S])[1]  # 183 days after the envelope: far ahead of NOW


def perfect(level: int, index: int) -> bytes:
    return merkle.root_of(LEAVES[index << level : (index + 1) << level])


CHECKPOINT = sign_checkpoint(KEY, NODE, SIZE, merkle.root_of(LEAVES), NOW_NS - 1000, None)


def commitment(opened: bool = True) -> wh.Commitment:
    content, expiry = signed_content(RAWS[S])
    out = wh.Commitment(
        checkpoint=CHECKPOINT.signed,
        sequence_id=S,
        leaf_hash=LEAVES[S - 1],
        inclusion_proof=merkle.inclusion_proof(S - 1, SIZE, perfect),
    )
    if opened:
        out.opening.CopyFrom(
            wh.LeafOpening(expiry_unixtime=expiry, content_hash=keccak256(content))
        )
    return out


def held(without: frozenset[int] = frozenset(), expiry: int = EXPIRY) -> list[HeldLeaf]:
    return [
        HeldLeaf(NODE, s, LEAVES[s - 1], expiry, None if s in without else RAWS[s])
        for s in range(1, SIZE + 1)
    ]


def holdings(
    edit: Callable[[wh.UnsignedHoldings], None] = lambda h: None,
    key: SigningKey = KEY,
    answered_ns: int = NOW_NS,
) -> wh.SignedHoldings:
    """The honest account of the whole log, then `edit`ed (a withholder's lie), signed."""
    unsigned = account(NODE, 1, SIZE, SIZE, held(), answered_ns)
    edit(unsigned)
    return sign_holdings(key, unsigned)


def omit(unsigned: wh.UnsignedHoldings) -> None:
    del unsigned.envelopes[S - 1]


def report(proof_holdings: wh.SignedHoldings, opened: bool = True, node: int = NODE) -> str | None:
    unsigned = withholding_report(node, commitment(opened), proof_holdings, NOW_NS)
    return why_unproven(unsigned, KEYS)


def test_an_account_that_leaves_out_a_committed_id_proves_withholding() -> None:
    assert report(holdings(omit)) is None
    assert report(holdings(omit), opened=False) is None  # the opening is not needed for that


def test_calling_an_id_expired_before_its_expiry_proves_withholding() -> None:
    def ahead(unsigned: wh.UnsignedHoldings) -> None:
        omit(unsigned)
        unsigned.expired.add(sequence_id=S, expiry_unixtime=EXPIRY)

    def false_expiry(unsigned: wh.UnsignedHoldings) -> None:
        omit(unsigned)
        unsigned.expired.add(sequence_id=S, expiry_unixtime=1)

    assert report(holdings(ahead)) is None
    # A false expiry in the past is shown false by the opening the checkpoint proves...
    assert report(holdings(false_expiry)) is None
    # ...and without that opening nothing shows it false.
    assert "named expired" in str(report(holdings(false_expiry), opened=False))


def test_the_report_survives_the_hosts_signature_and_an_upstream_decoder() -> None:
    unsigned = withholding_report(NODE, commitment(), holdings(omit), NOW_NS)
    signed = mb.MisbehaviorReport.FromString(
        sign_report(unsigned, HOST, NOW_NS).SerializeToString()
    )
    stored = mb.UnsignedMisbehaviorReport.FromString(signed.unsigned_misbehavior_report)
    assert int(stored.type) == WITHHOLDING and type_name(stored.type) == "WITHHOLDING"
    assert stored.WhichOneof("failure") is None  # upstream sees no failure it knows
    assert extended(stored).withholding.commitment.sequence_id == S
    assert why_unproven(stored, KEYS) is None


def test_an_honest_account_never_convicts() -> None:
    assert "was served" in str(report(holdings()))
    assert "was served" in str(report(holdings(), opened=False))


def test_an_honest_originator_that_lost_a_row_does_not_sign_until_it_healed() -> None:
    with pytest.raises(Healing) as lost:
        account(NODE, 1, SIZE, SIZE, held(without=frozenset({S})), NOW_NS)
    assert lost.value.sequence_ids == [S]
    healed = sign_holdings(KEY, account(NODE, 1, SIZE, SIZE, held(), NOW_NS))
    assert "was served" in str(report(healed))


def test_an_honest_account_of_an_expired_id_never_convicts() -> None:
    after_expiry = (EXPIRY + 1) * NS_PER_SECOND
    unsigned = account(NODE, 1, SIZE, SIZE, held(without=frozenset({S})), after_expiry)
    assert [(e.sequence_id, e.expiry_unixtime) for e in unsigned.expired] == [(S, EXPIRY)]
    honest = sign_holdings(KEY, unsigned)
    for opened in (True, False):
        assert "named expired" in str(report(honest, opened=opened))


def test_an_account_of_a_shorter_log_or_another_range_proves_nothing() -> None:
    shorter = sign_holdings(KEY, account(NODE, 1, SIZE, S - 1, held(), NOW_NS))
    assert "outside the holdings' range" in str(report(shorter))
    other_range = sign_holdings(KEY, account(NODE, S + 1, SIZE, SIZE, held(), NOW_NS))
    assert "outside the holdings' range" in str(report(other_range))


def _tamper_commitment(edit: Callable[[wh.Commitment], None]) -> str | None:
    proof = commitment()
    edit(proof)
    unsigned = withholding_report(NODE, proof, holdings(omit), NOW_NS)
    return why_unproven(unsigned, KEYS)


def _flip(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 1])


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda c: setattr(c, "checkpoint", _flip(c.checkpoint)), "checkpoint"),
        (
            lambda c: setattr(
                c,
                "checkpoint",
                sign_checkpoint(OTHER, NODE, SIZE, merkle.root_of(LEAVES), 1, None).signed,
            ),
            "not signed by that node's registry key",
        ),
        (lambda c: setattr(c, "sequence_id", S + 1), "not in the checkpoint"),
        (lambda c: setattr(c, "sequence_id", SIZE + 1), "not in the checkpoint"),
        (lambda c: setattr(c, "leaf_hash", LEAVES[0]), "not in the checkpoint"),
        (lambda c: c.inclusion_proof.__setitem__(0, bytes(32)), "not in the checkpoint"),
        (lambda c: setattr(c.opening, "expiry_unixtime", 1), "opening is not the leaf"),
        (lambda c: setattr(c.opening, "content_hash", bytes(32)), "opening is not the leaf"),
    ],
)
def test_every_tampered_commitment_field_is_rejected(
    edit: Callable[[wh.Commitment], None], expected: str
) -> None:
    assert expected in str(_tamper_commitment(edit))


def test_tampered_or_foreign_holdings_are_rejected() -> None:
    flipped = holdings(omit)
    flipped.unsigned_holdings = _flip(flipped.unsigned_holdings)
    assert "holdings" in str(report(flipped))
    assert "not signed by the accused" in str(report(holdings(omit, key=OTHER)))

    def other_node(unsigned: wh.UnsignedHoldings) -> None:
        omit(unsigned)
        unsigned.originator_node_id = 200

    other_log = holdings(other_node)
    assert "node 200's log" in str(report(other_log))
    # Another node is not accused by node 100's signatures.
    assert "checkpoint" in str(report(holdings(omit), node=200))


def test_an_accusation_proves_nothing() -> None:
    unsigned = accusation_report(NODE, commitment(), "UNAVAILABLE: healing", NOW_NS, NOW_NS)
    assert "carries no proof" in str(why_unproven(unsigned, KEYS))
    assert type_name(unsigned.type) == "WITHHOLDING_ACCUSATION"
