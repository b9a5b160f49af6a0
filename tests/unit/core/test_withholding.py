from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.support.withholding_log import CommittedLog, Edit, leaving_out
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.core import merkle
from xnode.core.checkpoints import sign_checkpoint
from xnode.core.constants import NS_PER_SECOND
from xnode.core.crypto import SigningKey
from xnode.core.evidence import why_unproven
from xnode.core.leaves import HeldLeaf
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
HOST = SigningKey.generate()
NODE = 100
KEYS = {NODE: [KEY.public_key], 200: [OTHER.public_key]}
NOW_NS = 1_790_000_000 * NS_PER_SECOND  # expiries 182 days later: past the openings epoch
SIZE = 6
S = 4  # the sequence id withheld
LOG = CommittedLog(KEY, NODE, SIZE, NOW_NS)
EXPIRY = LOG.expiry(S)  # 182 days ahead
LEAVES = LOG.leaves
omit = leaving_out(LOG, S)
OTHER_LOG = CommittedLog(KEY, NODE, SIZE, NOW_NS - 1)  # the same ids, other contents


def commitment(opened: bool = True) -> wh.Commitment:
    return LOG.commitment(S, opened)


def held(without: frozenset[int] = frozenset()) -> list[HeldLeaf]:
    return LOG.held(without)


def holdings(edit: Edit | None = None, key: SigningKey = KEY) -> wh.SignedHoldings:
    return LOG.holdings(edit, key)


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


def test_serving_something_else_in_place_of_a_committed_id_proves_withholding() -> None:
    def substitute(unsigned: wh.UnsignedHoldings) -> None:
        omit(unsigned)
        unsigned.envelopes.append(OTHER_LOG.raws[S])  # sequence id S, other content

    assert report(holdings(substitute)) is None


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
    assert "below sequence id" in str(report(shorter))
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
        (
            lambda c: setattr(
                c,
                "checkpoint",
                sign_checkpoint(KEY, 200, SIZE, merkle.root_of(LEAVES), 1, None).signed,
            ),
            "the checkpoint is of node 200's log",
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
