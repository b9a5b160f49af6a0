"""Withholding: an originator that committed a sequence id and will not serve it.

"Did not serve" is no signature, so a plain non-answer proves nothing: it may be a network
fault, or an honest originator fetching back a row it lost. What can be proven is a signed
account that contradicts the originator's own commitment. An originator asked for part of
its own log signs its holdings (`xnode.withholding.v1.UnsignedHoldings`): every sequence id
in the range up to its log size is served, or named expired with the expiry its leaf
commits to, or named unprovable (a format 1 leaf without its envelope). An honest originator
that cannot account for one (a loss being repaired) answers UNAVAILABLE instead of signing
(`account`). Its signed holdings prove WITHHOLDING when, for a sequence id its own signed
checkpoint covers, they leave it out, call it expired against its committed expiry, open it
falsely or not at all, or serve something else in its place (`judge_holdings` lists the
cases). Time enters only as the asker's: a signed question (`ask`) whose `asked_ns` the
holdings must answer, never the accused's own clock. An honest originator signs none of
these: it judges expiry with the committed expiry at the question's time and opens every
leaf it names expired from the openings epoch on.

A non-answer is filed as WITHHOLDING_ACCUSATION: the commitment is proven, the rest is the
reporter's word, left to the council's judgement like liveness reports (docs/evidence.md)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from google.protobuf.message import DecodeError

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.core import merkle
from xnode.core.checkpoints import (
    Checkpoint,
    CheckpointError,
    check_inclusion,
    verify_checkpoint,
)
from xnode.core.constants import NS_PER_SECOND
from xnode.core.crypto import (
    SignatureError,
    SigningKey,
    holdings_digest,
    keccak256,
    question_digest,
    recover_public_key,
)
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
# The openings epoch: from this expiry on, an "expired" claim must carry the leaf's opening
# (its content hash, kept beside the leaf). A node keeps the content hash of every envelope
# it stores, and its upgrade fills it in for every envelope it still holds, so a node
# running this release before this time can open every leaf whose expiry is later: an
# envelope expiring later cannot have been pruned before. (2027-01-15T08:00:00Z)
OPENINGS_FROM_UNIX = 1_800_000_000
# How far a question's time may be from the answering node's clock: further, and it is
# refused (the asker's clock is wrong, or it replays an old question).
QUESTION_SKEW_NS = 300 * NS_PER_SECOND
# An envelope expires at least a day after its originator time (retention is whole days);
# a checkpoint's time is its originator's clock when it signed it, and a sequence id past
# its tree was stamped after, by more than a day less only if that clock stepped back a day.
_APPENDED_MARGIN_S = 86_400


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
    question: wh.SignedQuestion | None = None,
) -> wh.UnsignedHoldings:
    """The honest account of `held` (the originator's leaves in first..min(last, log_size),
    with their envelopes where held), judged at the question's time (`asked_ns`, the one a
    verifier uses) or without a question at `answered_ns`; raises Healing when one is lost
    or mismatches, a sequence id in the range has no leaf at all, or an expired leaf from
    the openings epoch on cannot be opened (an honest node never signs a claim that
    convicts it)."""
    at_ns = answered_ns
    holdings = wh.UnsignedHoldings(
        originator_node_id=originator,
        first=first,
        last=last,
        log_size=log_size,
        answered_ns=answered_ns,
    )
    if question is not None:
        at_ns = wh.Question.FromString(question.unsigned_question).asked_ns
        holdings.question_hash = keccak256(question.unsigned_question)
    now_s = at_ns // NS_PER_SECOND
    by_id = {h.sequence_id: h for h in held}
    healing: list[int] = []
    for sequence_id in range(first, min(last, log_size) + 1):
        leaf = by_id.get(sequence_id)
        verdict = leaf.judge(now_s) if leaf is not None else Held.LOST
        if leaf is not None and verdict is Held.MATCHES and leaf.raw is not None:
            holdings.envelopes.append(leaf.raw)
        elif leaf is not None and verdict is Held.EXPIRED and _openable(leaf):
            opening = leaf.opening()
            expiry = leaf.committed_expiry or 0
            holdings.expired.add(
                sequence_id=sequence_id,
                expiry_unixtime=expiry,
                content_hash=opening[0] if opening else b"",
            )
        elif verdict is Held.FORMAT_1:
            holdings.unprovable.append(sequence_id)
        else:
            healing.append(sequence_id)
    if healing:
        raise Healing(healing)
    return holdings


def _openable(leaf: HeldLeaf) -> bool:
    """Whether an honest node may name this leaf expired: with its opening, or with an
    expiry before the openings epoch (which needs none)."""
    return leaf.opening() is not None or (leaf.committed_expiry or 0) < OPENINGS_FROM_UNIX


def ask(
    key: SigningKey, asker: int, originator: int, first: int, last: int, asked_ns: int
) -> wh.SignedQuestion:
    """The asker's signed question for `originator`'s holdings of first..last, at its time."""
    unsigned = wh.Question(
        asker_node_id=asker,
        originator_node_id=originator,
        first=first,
        last=last,
        asked_ns=asked_ns,
    ).SerializeToString(deterministic=True)
    return wh.SignedQuestion(
        unsigned_question=unsigned, signature=key.sign(question_digest(unsigned))
    )


def check_question(
    signed: wh.SignedQuestion, registry: Mapping[int, Collection[bytes]], accused: int
) -> wh.Question:
    """The question, signed by the registry key of its asker, another node than the
    accused; raises ValueError naming what failed."""
    try:
        question = wh.Question.FromString(signed.unsigned_question)
        signer = recover_public_key(signed.signature, question_digest(signed.unsigned_question))
    except (SignatureError, DecodeError) as exc:
        raise ValueError(f"question: {exc}") from None
    if question.asker_node_id == accused:
        raise ValueError("the question is the accused's own: its time would be its choice")
    if signer not in registry.get(question.asker_node_id, ()):
        raise ValueError(f"the question is not signed by node {question.asker_node_id}'s key")
    return question


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
    tree_size: int = 0  # the checkpoint's


def _signed_checkpoint(signed: bytes, keys: Collection[bytes]) -> Checkpoint:
    """The checkpoint, signed by one of `keys`; raises ValueError naming what failed."""
    failure = "no registry key"
    for key in keys:
        try:
            return verify_checkpoint(signed, key)
        except CheckpointError as exc:
            failure = str(exc)
    raise ValueError(f"checkpoint: {failure}")


def check_commitment(commitment: wh.Commitment, node_id: int, keys: Collection[bytes]) -> Opened:
    """The accused's signed checkpoint of its own log covers the sequence id with this leaf
    (format 2), and the opening, when given, is that leaf's; raises ValueError naming what
    failed."""
    checkpoint = _signed_checkpoint(commitment.checkpoint, keys)
    if checkpoint.originator_node_id != node_id:
        raise ValueError(f"the checkpoint is of node {checkpoint.originator_node_id}'s log")
    if checkpoint.leaf_format != FORMAT_V2:
        raise ValueError("a format 1 checkpoint commits to no expiry")
    sequence_id = commitment.sequence_id
    try:
        check_inclusion(checkpoint, sequence_id, commitment.leaf_hash, commitment.inclusion_proof)
    except merkle.ProofError as exc:
        raise ValueError(f"leaf of {sequence_id} is not in the checkpoint: {exc}") from None
    size = checkpoint.tree_size
    if not commitment.HasField("opening"):
        return Opened(sequence_id, commitment.leaf_hash, None, size)
    opening = commitment.opening
    if opened_leaf_v2(opening.content_hash, opening.expiry_unixtime) != commitment.leaf_hash:
        raise ValueError(f"the opening is not the leaf of {sequence_id}")
    return Opened(sequence_id, commitment.leaf_hash, opening.expiry_unixtime, size)


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


class Answer(StrEnum):
    """What an originator's answer about a committed sequence id amounts to."""

    PROVEN = "proven"  # it signed what contradicts its commitment: WITHHOLDING
    SETTLED = "settled"  # served, provably expired, or nothing to hold it to
    NON_ANSWER = "non_answer"  # no account of it that holds: an accusation after patience


@dataclass(frozen=True, slots=True)
class Judged:
    answer: Answer
    why: str


def _verdict(answer: Answer, why: str) -> Judged:
    return Judged(answer, why)


def judge_holdings(
    proof: wh.WithholdingProof, node_id: int, registry: Mapping[int, Collection[bytes]]
) -> Judged:
    """What the accused's signed holdings say of the committed sequence id. Pure and the
    same on any day: the only time used is the question's, signed by its asker (another
    registry node), never the accused's `answered_ns`.

    PROVEN, for a sequence id S its own format 2 checkpoint covers, when its signed account
    (a) leaves S out; (b) names S expired at an expiry not passed at the question's time;
    (c) names S expired while the leaf commits to an expiry not passed then, or to another
    expiry (shown by the reporter's opening, or by the account's own); (d) serves in S's
    place an envelope the leaf does not commit to; (e) names S expired with an opening that
    does not open its leaf, or with none for an expiry from the openings epoch on; or
    (f) names S a format 1 leaf while the reporter opens it as format 2.
    NON_ANSWER when the holdings do not hold the accused to anything: not its signature,
    another log, a range or question other than the one asked (an account its byte budget
    cut short of the question's `last` answers it up to its own), a log size below S or below
    its own checkpoint (a log that shrank, a restored backup: judged, not proven)."""
    try:
        opened = check_commitment(proof.commitment, node_id, registry.get(node_id, ()))
    except ValueError as exc:
        return _verdict(Answer.SETTLED, f"commitment: {exc}")
    try:
        holdings = _holdings_of(proof.holdings, registry.get(node_id, ()))
    except ValueError as exc:
        return _verdict(Answer.NON_ANSWER, str(exc))
    s = opened.sequence_id
    if holdings.originator_node_id != node_id:
        return _verdict(
            Answer.NON_ANSWER, f"the holdings account for node {holdings.originator_node_id}'s log"
        )
    asked_s: int | None = None
    if proof.HasField("question"):
        try:
            question = check_question(proof.question, registry, node_id)
        except ValueError as exc:
            return _verdict(Answer.NON_ANSWER, str(exc))
        # An account the answer's byte budget cut covers first..its own `last` only: it
        # still answers the question, and an id past its `last` is asked again (below).
        asked = (question.originator_node_id, question.first)
        if (
            keccak256(proof.question.unsigned_question) != holdings.question_hash
            or asked != (holdings.originator_node_id, holdings.first)
            or holdings.last > question.last
        ):
            return _verdict(Answer.NON_ANSWER, "the holdings do not answer the question")
        asked_s = question.asked_ns // NS_PER_SECOND
    if not holdings.first <= s <= holdings.last:
        return _verdict(
            Answer.NON_ANSWER,
            f"sequence id {s} is outside the holdings' range {holdings.first}..{holdings.last}",
        )
    if holdings.log_size < max(s, opened.tree_size):
        return _verdict(
            Answer.NON_ANSWER,
            f"log size {holdings.log_size} is below sequence id {s} or its own checkpoint's "
            f"{opened.tree_size}",
        )
    try:
        after_s = _appended_after(proof, node_id, registry.get(node_id, ()), s)
    except ValueError as exc:
        return _verdict(Answer.SETTLED, f"appended_after: {exc}")
    return _judge_account(holdings, opened, asked_s, after_s)


def _appended_after(
    proof: wh.WithholdingProof, node_id: int, keys: Collection[bytes], sequence_id: int
) -> int | None:
    """The time (unix seconds) of an earlier checkpoint of the accused whose tree ends
    below `sequence_id`, or None when the proof carries none."""
    if not proof.appended_after:
        return None
    earlier = _signed_checkpoint(proof.appended_after, keys)
    if earlier.originator_node_id != node_id or earlier.tree_size >= sequence_id:
        raise ValueError(f"not a checkpoint of node {node_id}'s log ending below {sequence_id}")
    return earlier.originator_ns // NS_PER_SECOND


def _judge_account(
    holdings: wh.UnsignedHoldings, opened: Opened, asked_s: int | None, after_s: int | None
) -> Judged:
    s = opened.sequence_id
    served = _served(holdings, s)
    if any(leaf_matches(opened.leaf, raw) for raw in served):
        return _verdict(Answer.SETTLED, f"sequence id {s} was served")
    if served:
        return _verdict(Answer.PROVEN, f"(d) sequence id {s} served in a form not committed to")
    if s in holdings.unprovable:
        if opened.expiry is not None:
            return _verdict(Answer.PROVEN, f"(f) sequence id {s} is an opened format 2 leaf")
        return _verdict(Answer.SETTLED, f"sequence id {s} is named a format 1 leaf")
    named = {e.sequence_id: e for e in holdings.expired}
    if s not in named:
        return _verdict(Answer.PROVEN, f"(a) sequence id {s} is left out")
    return _judge_expired(named[s], opened, asked_s, after_s)


def _judge_expired(
    claim: wh.ExpiredLeaf, opened: Opened, asked_s: int | None, after_s: int | None
) -> Judged:
    s, expiry = opened.sequence_id, claim.expiry_unixtime
    committed = opened.expiry
    if claim.content_hash:
        if opened_leaf_v2(claim.content_hash, expiry) != opened.leaf:
            return _verdict(Answer.PROVEN, f"(e) the opening named for {s} does not open its leaf")
        committed = expiry
    elif expiry >= OPENINGS_FROM_UNIX or (after_s or 0) >= OPENINGS_FROM_UNIX:
        return _verdict(Answer.PROVEN, f"(e) sequence id {s} named expired without its opening")
    if after_s is not None and expiry != 0 and expiry + _APPENDED_MARGIN_S <= after_s:
        return _verdict(Answer.PROVEN, f"(c) sequence id {s} named expired before it was appended")
    if committed is not None and committed != expiry:
        return _verdict(Answer.PROVEN, f"(c) the leaf of {s} commits to expiry {committed}")
    if asked_s is None:
        return _verdict(Answer.SETTLED, f"sequence id {s} named expired, asked at no known time")
    if not is_expired(expiry, asked_s):
        return _verdict(Answer.PROVEN, f"(b) sequence id {s} named expired before its expiry")
    return _verdict(Answer.SETTLED, f"sequence id {s} was named expired, and it was")


def why_not_withheld(
    proof: wh.WithholdingProof, node_id: int, registry: Mapping[int, Collection[bytes]]
) -> str | None:
    """None when the proof shows node `node_id` withheld a committed sequence id, else what
    failed (judge_holdings)."""
    judged = judge_holdings(proof, node_id, registry)
    return None if judged.answer is Answer.PROVEN else judged.why


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
    question: wh.SignedQuestion | None = None,
) -> mb.UnsignedMisbehaviorReport:
    """A node's own WITHHOLDING report, as the upstream message it is stored and signed as;
    `question`: the one the holdings answer (the time their claims are judged at)."""
    proof = wh.WithholdingProof(commitment=commitment, holdings=holdings, question=question)
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
