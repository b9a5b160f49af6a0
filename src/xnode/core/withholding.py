"""Withholding: an originator that committed a sequence id and will not serve it.

"Did not serve" is no signature, so a plain non-answer proves nothing: it may be a network
fault, or an honest originator fetching back a row it lost. What can be proven is a signed
account that contradicts the originator's own commitment. An originator asked for part of
its own log signs its holdings (`xnode.withholding.v1.UnsignedHoldings`): every sequence id
in the range up to its log size is served, or named expired with the expiry its leaf
commits to, or named unprovable (a format 1 leaf without its envelope). An honest originator
that cannot account for one (a loss being repaired) answers UNAVAILABLE instead of signing
(`account`). Its signed holdings prove WITHHOLDING when, for a sequence id its own signed
checkpoint covers, they (a) leave it out, (b) call it expired at an expiry that had not
passed when they were signed, or (c) call it expired while the leaf the checkpoint proves
commits to an expiry that had not passed, or (d) serve in its place an envelope the leaf
does not commit to. An honest originator signs none of these: it
judges expiry with the committed expiry at the very time it signs.

A non-answer is filed as WITHHOLDING_ACCUSATION: the commitment is proven, the rest is the
reporter's word, left to the council's judgement like liveness reports (docs/evidence.md)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.core import merkle
from xnode.core.checkpoints import CheckpointError, check_inclusion, verify_checkpoint
from xnode.core.constants import NS_PER_SECOND
from xnode.core.crypto import SignatureError, SigningKey, holdings_digest, recover_public_key
from xnode.core.leaves import FORMAT_V2, Held, HeldLeaf, leaf_matches, opened_leaf_v2
from xnode.core.retention import is_expired
from xnode_api.completeness.v1 import completeness_pb2 as cp
from xnode_api.withholding.v1 import withholding_pb2 as wh

WITHHOLDING = wh.MISBEHAVIOR_WITHHOLDING
WITHHOLDING_ACCUSATION = wh.MISBEHAVIOR_WITHHOLDING_ACCUSATION
SPLIT_VIEW = wh.MISBEHAVIOR_SPLIT_VIEW
OMISSION = wh.MISBEHAVIOR_OMISSION
MAX_HOLDINGS_SPAN = 256  # sequence ids one signed account may cover
# How long an originator may leave a committed id unaccounted for before its silence is an
# accusation (the default of the `withholding_patience_seconds` setting): an honest node
# heals a lost row from its peers well within it.
PATIENCE_S = 3600.0


class Healing(Exception):
    """An honest originator cannot account for these sequence ids yet (lost, being fetched
    back, or stored in a form its leaf does not commit to): it must not sign."""

    def __init__(self, sequence_ids: Sequence[int]) -> None:
        super().__init__(f"sequence ids {list(sequence_ids)} are being repaired")
        self.sequence_ids = list(sequence_ids)


def account(
    originator: int,
    first: int,
    last: int,
    log_size: int,
    held: Sequence[HeldLeaf],
    answered_ns: int,
) -> wh.UnsignedHoldings:
    """The honest account of `held` (the originator's leaves in first..min(last, log_size),
    with their envelopes where held) at `answered_ns`; raises Healing when one is lost or
    mismatches, or a sequence id in the range has no leaf at all."""
    now_s = answered_ns // NS_PER_SECOND
    holdings = wh.UnsignedHoldings(
        originator_node_id=originator,
        first=first,
        last=last,
        log_size=log_size,
        answered_ns=answered_ns,
    )
    by_id = {h.sequence_id: h for h in held}
    healing: list[int] = []
    for sequence_id in range(first, min(last, log_size) + 1):
        leaf = by_id.get(sequence_id)
        verdict = leaf.judge(now_s) if leaf is not None else Held.LOST
        if leaf is not None and verdict is Held.MATCHES and leaf.raw is not None:
            holdings.envelopes.append(leaf.raw)
        elif leaf is not None and verdict is Held.EXPIRED:
            expiry = leaf.committed_expiry or 0
            holdings.expired.add(sequence_id=sequence_id, expiry_unixtime=expiry)
        elif verdict is Held.FORMAT_1:
            holdings.unprovable.append(sequence_id)
        else:
            healing.append(sequence_id)
    if healing:
        raise Healing(healing)
    return holdings


def sign_holdings(key: SigningKey, holdings: wh.UnsignedHoldings) -> wh.SignedHoldings:
    unsigned = holdings.SerializeToString(deterministic=True)
    return wh.SignedHoldings(
        unsigned_holdings=unsigned, signature=key.sign(holdings_digest(unsigned))
    )


@dataclass(frozen=True, slots=True)
class Opened:
    """What a verified commitment says of a sequence id."""

    sequence_id: int
    leaf: bytes
    expiry: int | None  # None: the reporter knew no opening of the leaf


def check_commitment(commitment: wh.Commitment, node_id: int, keys: Collection[bytes]) -> Opened:
    """The accused's signed checkpoint of its own log covers the sequence id with this leaf
    (format 2), and the opening, when given, is that leaf's; raises ValueError naming what
    failed."""
    checkpoint = None
    for key in keys:
        try:
            checkpoint = verify_checkpoint(commitment.checkpoint, key)
            break
        except CheckpointError as exc:
            failure = str(exc)
    if checkpoint is None:
        raise ValueError(f"checkpoint: {failure if keys else 'no registry key'}")
    if checkpoint.originator_node_id != node_id:
        raise ValueError(f"the checkpoint is of node {checkpoint.originator_node_id}'s log")
    if checkpoint.leaf_format != FORMAT_V2:
        raise ValueError("a format 1 checkpoint commits to no expiry")
    sequence_id = commitment.sequence_id
    try:
        check_inclusion(checkpoint, sequence_id, commitment.leaf_hash, commitment.inclusion_proof)
    except merkle.ProofError as exc:
        raise ValueError(f"leaf of {sequence_id} is not in the checkpoint: {exc}") from None
    if not commitment.HasField("opening"):
        return Opened(sequence_id, commitment.leaf_hash, None)
    opening = commitment.opening
    if opened_leaf_v2(opening.content_hash, opening.expiry_unixtime) != commitment.leaf_hash:
        raise ValueError(f"the opening is not the leaf of {sequence_id}")
    return Opened(sequence_id, commitment.leaf_hash, opening.expiry_unixtime)


def _holdings_of(signed: wh.SignedHoldings, keys: Collection[bytes]) -> wh.UnsignedHoldings:
    try:
        signer = recover_public_key(signed.signature, holdings_digest(signed.unsigned_holdings))
        holdings = wh.UnsignedHoldings.FromString(signed.unsigned_holdings)
    except (SignatureError, DecodeError) as exc:
        raise ValueError(f"holdings: {exc}") from None
    if signer not in keys:
        raise ValueError("holdings are not signed by the accused's registry key")
    return holdings


def _served(holdings: wh.UnsignedHoldings, sequence_id: int) -> list[bytes]:
    """The envelopes the holdings serve at `sequence_id`."""
    found = []
    for raw in holdings.envelopes:
        try:
            envelope = envelopes_pb2.OriginatorEnvelope.FromString(raw)
            unsigned = envelopes_pb2.UnsignedOriginatorEnvelope.FromString(
                envelope.unsigned_originator_envelope
            )
        except DecodeError:
            continue
        if unsigned.originator_sequence_id == sequence_id:
            found.append(raw)
    return found


def why_not_withheld(
    proof: wh.WithholdingProof, node_id: int, keys: Collection[bytes]
) -> str | None:
    """None when the proof shows node `node_id` withheld a committed sequence id, else what
    failed. Pure, and the same on any day: every time in it is signed by the accused."""
    try:
        opened = check_commitment(proof.commitment, node_id, keys)
        holdings = _holdings_of(proof.holdings, keys)
    except ValueError as exc:
        return str(exc)
    s = opened.sequence_id
    if holdings.originator_node_id != node_id:
        return f"the holdings account for node {holdings.originator_node_id}'s log"
    if not holdings.first <= s <= min(holdings.last, holdings.log_size):
        return (
            f"sequence id {s} is outside the holdings' range {holdings.first}.."
            f"{min(holdings.last, holdings.log_size)}"
        )
    served = _served(holdings, s)
    if any(leaf_matches(opened.leaf, raw) for raw in served):
        return f"sequence id {s} was served"
    if served:
        return None  # served in a form its committed leaf does not commit to
    now_s = holdings.answered_ns // NS_PER_SECOND
    named = {e.sequence_id: e.expiry_unixtime for e in holdings.expired}
    if s in holdings.unprovable:
        return f"sequence id {s} is named a format 1 leaf: nothing is provable either way"
    if s not in named:
        return None  # left out of an account that must name it
    if not is_expired(named[s], now_s):
        return None  # called expired at an expiry still ahead
    if opened.expiry is not None and not is_expired(opened.expiry, now_s):
        return None  # called expired against the expiry its leaf commits to
    return f"sequence id {s} was named expired, and nothing shows it was not"


def extended(report: mb.UnsignedMisbehaviorReport) -> wh.ExtendedMisbehaviorReport:
    """The extension fields of an upstream report (kept as unknown fields)."""
    return wh.ExtendedMisbehaviorReport.FromString(report.SerializeToString())


def _upstream(report: wh.ExtendedMisbehaviorReport) -> mb.UnsignedMisbehaviorReport:
    return mb.UnsignedMisbehaviorReport.FromString(report.SerializeToString(deterministic=True))


def _own_report(
    node_id: int,
    kind: wh.ExtendedMisbehavior.ValueType,
    reporter_time_ns: int,
    by_node: bool = True,
    **proof: Any,
) -> mb.UnsignedMisbehaviorReport:
    """A report of one of xnode's extension kinds, `proof` in its field: a node's own, or a
    client's (`by_node` False)."""
    return _upstream(
        wh.ExtendedMisbehaviorReport(
            reporter_time_ns=reporter_time_ns,
            misbehaving_node_id=node_id,
            type=kind,
            submitted_by_node=by_node,
            **proof,
        )
    )


def withholding_report(
    node_id: int,
    commitment: wh.Commitment,
    holdings: wh.SignedHoldings,
    reporter_time_ns: int,
) -> mb.UnsignedMisbehaviorReport:
    """A node's own WITHHOLDING report, as the upstream message it is stored and signed as."""
    proof = wh.WithholdingProof(commitment=commitment, holdings=holdings)
    return _own_report(node_id, WITHHOLDING, reporter_time_ns, withholding=proof)


def accusation_report(
    node_id: int, commitment: wh.Commitment, answer: str, asked_ns: int, reporter_time_ns: int
) -> mb.UnsignedMisbehaviorReport:
    """A node's own WITHHOLDING_ACCUSATION: the commitment and how the accused answered."""
    accusation = wh.WithholdingAccusation(commitment=commitment, answer=answer, asked_ns=asked_ns)
    return _own_report(
        node_id, WITHHOLDING_ACCUSATION, reporter_time_ns, withholding_accusation=accusation
    )


def why_not_committed(
    report: mb.UnsignedMisbehaviorReport, node_id: int, keys: Collection[bytes]
) -> str | None:
    """None when a WITHHOLDING_ACCUSATION carries the accused's own verified commitment to the
    sequence id it says went unserved, else what failed: an accusation without one (empty,
    another node's checkpoint, a leaf the checkpoint does not hold) accuses nothing."""
    try:
        proof = extended(report)
    except DecodeError as exc:
        return f"the accusation does not decode ({exc})"
    if not proof.HasField("withholding_accusation"):
        return "a WITHHOLDING_ACCUSATION report carries no accusation"
    try:
        check_commitment(proof.withholding_accusation.commitment, node_id, keys)
    except ValueError as exc:
        return f"commitment: {exc}"
    return None


def why_not_split(proof: wh.SplitView, node_id: int, keys: Collection[bytes]) -> str | None:
    """None when two of the accused's own checkpoints commit to two different format 2 leaves,
    both opened, at one sequence id: two contents (or expiries) signed for one id, so the
    log it shows some is not the one it shows others. Else what failed.

    Both leaves must be opened: a format 2 leaf is computed from the envelope alone, so an
    honest originator has one per sequence id, whatever it held when it migrated or was
    restored; a format 1 leaf (left by migration 0008 where the envelope was gone) has no
    format 2 opening, so the honest difference between a migrated mixed tree and a pure one
    never proves anything."""
    try:
        first = check_commitment(proof.first, node_id, keys)
        second = check_commitment(proof.second, node_id, keys)
    except ValueError as exc:
        return str(exc)
    if first.sequence_id != second.sequence_id:
        return f"the commitments are to sequence ids {first.sequence_id} and {second.sequence_id}"
    if first.expiry is None or second.expiry is None:
        return "both leaves must be opened: an unopened leaf may be format 1"
    if first.leaf == second.leaf:
        return f"both checkpoints commit to the same leaf of sequence id {first.sequence_id}"
    return None


def split_view_report(
    node_id: int, first: wh.Commitment, second: wh.Commitment, reporter_time_ns: int
) -> mb.UnsignedMisbehaviorReport:
    """A node's own SPLIT_VIEW report, as the upstream message it is stored and signed as."""
    split = wh.SplitView(first=first, second=second)
    return _own_report(node_id, SPLIT_VIEW, reporter_time_ns, split_view=split)


def omission_report(
    node_id: int, answer: cp.SignedAnswer, reporter_time_ns: int, by_node: bool = False
) -> mb.UnsignedMisbehaviorReport:
    """An OMISSION report, a client's unless `by_node`: the accused's own signed
    completeness answer (xnode.core.completeness.why_not_omitted says what it proves)."""
    return _own_report(node_id, OMISSION, reporter_time_ns, by_node, omission=answer)
