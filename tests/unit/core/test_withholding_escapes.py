"""The withholder's escapes, generated: every answer a node that holds a committed envelope
can give instead of serving it ends in a proof (WITHHOLDING) or in a non-answer (an
accusation after the patience), never "settled"; and no report assembled from an honest
node's answers, by any reporter or asker, proves anything against it.

The escapes: naming the id expired with any expiry (with no opening, a false one, or the
true one before its time); signing a time of its own choice (`answered_ns` far ahead); a
false "format 1, unprovable"; a log size below its own checkpoint; an empty, garbage or
foreign signed reply; answering another range or another question."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.withholding_log import CommittedLog
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.core.constants import NS_PER_SECOND
from xnode.core.crypto import SigningKey, keccak256
from xnode.core.evidence import why_unproven
from xnode.core.withholding import (
    OPENINGS_FROM_UNIX,
    Answer,
    Healing,
    Judged,
    account,
    ask,
    judge_holdings,
    sign_holdings,
    withholding_report,
)
from xnode_api.withholding.v1 import withholding_pb2 as wh

NODE, ASKER, LIAR = 100, 300, 400
KEY, ASKER_KEY, LIAR_KEY = (SigningKey(bytes([n]) * 32) for n in (41, 42, 43))
REGISTRY = {
    NODE: (KEY.public_key,),
    ASKER: (ASKER_KEY.public_key,),
    LIAR: (LIAR_KEY.public_key,),
}
DAY_S = 86_400
# Logs originated before and after the openings epoch (their expiries 182 days on).
EPOCHS = (OPENINGS_FROM_UNIX - 400 * DAY_S, OPENINGS_FROM_UNIX + DAY_S)
SIZE = 6


@cache
def committed(now_s: int) -> CommittedLog:
    return CommittedLog(KEY, NODE, SIZE, now_s * NS_PER_SECOND)


def _proof(
    log: CommittedLog,
    s: int,
    holdings: wh.SignedHoldings,
    question: wh.SignedQuestion | None,
    opened: bool,
    after: bool,
) -> wh.WithholdingProof:
    proof = wh.WithholdingProof(commitment=log.commitment(s, opened), holdings=holdings)
    if question is not None:
        proof.question.CopyFrom(question)
    if after and s > 1:
        proof.appended_after = log.checkpoint_of(s - 1).signed
    return proof


def _report(proof: wh.WithholdingProof, at_ns: int) -> mb.UnsignedMisbehaviorReport:
    """The report a node files with this proof, as stored and checked."""
    report = withholding_report(NODE, proof.commitment, proof.holdings, at_ns)
    extended = wh.ExtendedMisbehaviorReport.FromString(report.SerializeToString())
    extended.withholding.CopyFrom(proof)
    return mb.UnsignedMisbehaviorReport.FromString(extended.SerializeToString())


def _verdicts(
    log: CommittedLog, s: int, holdings: wh.SignedHoldings, q: wh.SignedQuestion | None
) -> Iterator[tuple[Judged, wh.WithholdingProof]]:
    """Every report a reporter can build from these holdings: opened or not, with the earlier
    checkpoint or not, with the question or without."""
    for opened in (True, False):
        for after in (True, False):
            for question in (q, None):
                proof = _proof(log, s, holdings, question, opened, after)
                yield judge_holdings(proof, NODE, REGISTRY), proof


def _byzantine(
    data: st.DataObject, log: CommittedLog, s: int, asked_ns: int, question: wh.SignedQuestion
) -> wh.SignedHoldings:
    """An answer that does not serve the committed envelope of `s`, which the accused holds."""
    honest = account(NODE, 1, SIZE, SIZE, log.held(), asked_ns, question)
    unsigned = wh.UnsignedHoldings()
    unsigned.CopyFrom(honest)
    kept = [raw for raw in unsigned.envelopes if raw != log.raws[s]]
    del unsigned.envelopes[:]
    unsigned.envelopes.extend(kept)
    lie = data.draw(
        st.sampled_from(
            ["leave out", "expired", "unprovable", "shorter log", "own clock", "another range"]
        )
    )
    if lie == "expired":
        expiry = data.draw(
            st.sampled_from([log.expiry(s), 0, 1])
            | st.integers(0, 2 * OPENINGS_FROM_UNIX)
            | st.integers(asked_ns // NS_PER_SECOND - 400 * DAY_S, asked_ns // NS_PER_SECOND)
        )
        content_hash = data.draw(
            st.sampled_from([b"", log.content_hash(s), bytes(32)]) | st.binary(max_size=40)
        )
        unsigned.expired.add(sequence_id=s, expiry_unixtime=expiry, content_hash=content_hash)
    elif lie == "unprovable":
        unsigned.unprovable.append(s)
    elif lie == "shorter log":
        unsigned.log_size = data.draw(st.integers(0, SIZE - 1))
    elif lie == "own clock":  # its own time, far ahead, and no question answered
        unsigned.answered_ns = asked_ns + data.draw(st.integers(0, 10**9)) * NS_PER_SECOND
        unsigned.question_hash = b""
        unsigned.expired.add(sequence_id=s, expiry_unixtime=log.expiry(s))
    elif lie == "another range":
        unsigned.first, unsigned.last = (s + 1, SIZE) if s < SIZE else (1, s - 1)
    if data.draw(st.booleans()):  # the same lie, and anything else in the account
        unsigned.answered_ns = data.draw(st.integers(0, 2**63))
    return sign_holdings(KEY, unsigned)


@settings(max_examples=300, deadline=None)
@given(
    now_s=st.sampled_from(EPOCHS),
    s=st.integers(1, SIZE),
    ahead_s=st.integers(0, 181 * DAY_S),
    data=st.data(),
)
def test_every_answer_that_withholds_a_held_envelope_is_proven_or_a_non_answer(
    now_s: int, s: int, ahead_s: int, data: st.DataObject
) -> None:
    """The accused holds every envelope (so none has expired when asked: the question comes
    before the committed expiry); whatever it signs instead of serving `s`, every report a
    reporter builds from it is PROVEN or a NON_ANSWER, and with the question, the reporter's
    opening and the earlier checkpoint, the lies that can be are proven."""
    log = committed(now_s)
    asked_ns = (now_s + ahead_s) * NS_PER_SECOND
    question = ask(ASKER_KEY, ASKER, NODE, 1, SIZE, asked_ns)
    holdings = _byzantine(data, log, s, asked_ns, question)
    for judged, proof in _verdicts(log, s, holdings, question):
        assert judged.answer is not Answer.SETTLED or not _complete(proof), judged.why
        if judged.answer is Answer.PROVEN:
            assert why_unproven(_report(proof, asked_ns), REGISTRY) is None


def _complete(proof: wh.WithholdingProof) -> bool:
    """A report with everything a reporter that held the envelope has: the opening, the
    question, and (when s > 1) the checkpoint before it."""
    return (
        proof.commitment.HasField("opening")
        and proof.HasField("question")
        and (bool(proof.appended_after) or proof.commitment.sequence_id == 1)
    )


@settings(max_examples=300, deadline=None)
@given(
    now_s=st.sampled_from(EPOCHS),
    s=st.integers(1, SIZE),
    gone=st.frozensets(st.integers(1, SIZE)),
    unopened=st.frozensets(st.integers(1, SIZE)),
    asked_offset_s=st.integers(-30 * DAY_S, 400 * DAY_S),
    asker=st.sampled_from([ASKER, LIAR, NODE]),
    data=st.data(),
)
def test_no_report_from_an_honest_answer_proves_anything(
    now_s: int,
    s: int,
    gone: frozenset[int],
    unopened: frozenset[int],
    asked_offset_s: int,
    asker: int,
    data: st.DataObject,
) -> None:
    """An honest node whose envelopes `gone` were pruned (or lost), some of whose content
    hashes were never kept (`unopened`, only before the openings epoch), answers any
    question (by an honest asker, a liar at any time, or one in its own name): its answer,
    whatever a reporter assembles from it, proves nothing."""
    log = committed(now_s)
    if now_s >= OPENINGS_FROM_UNIX:
        unopened = frozenset()  # it kept every content hash since it ran this release
    asked_ns = (now_s + asked_offset_s) * NS_PER_SECOND
    key = {ASKER: ASKER_KEY, LIAR: LIAR_KEY, NODE: KEY}[asker]
    question = ask(key, asker, NODE, 1, SIZE, asked_ns)
    try:
        unsigned = account(NODE, 1, SIZE, SIZE, log.held(gone, unopened), asked_ns, question)
    except Healing:
        return  # it signs nothing: a non-answer, judged, never a proof
    holdings = sign_holdings(KEY, unsigned)
    other = ask(ASKER_KEY, ASKER, NODE, 1, SIZE, data.draw(st.integers(0, 2**62)))
    for q in (question, other):
        for judged, proof in _verdicts(log, s, holdings, q):
            assert judged.answer is not Answer.PROVEN, judged.why
            assert why_unproven(_report(proof, asked_ns), REGISTRY) is not None


@settings(max_examples=100, deadline=None)
@given(garbage=st.binary(max_size=200), signer=st.sampled_from([KEY, LIAR_KEY]))
def test_garbage_or_foreign_replies_are_non_answers(garbage: bytes, signer: SigningKey) -> None:
    """Bytes that are no holdings, or holdings signed by another key: a non-answer."""
    log = committed(EPOCHS[1])
    question = ask(ASKER_KEY, ASKER, NODE, 1, SIZE, EPOCHS[1] * NS_PER_SECOND)
    holdings = wh.SignedHoldings(
        unsigned_holdings=garbage, signature=signer.sign(keccak256(garbage))
    )
    for judged, _ in _verdicts(log, 2, holdings, question):
        assert judged.answer is Answer.NON_ANSWER, judged.why
    empty = wh.SignedHoldings()
    for judged, _ in _verdicts(log, 2, empty, question):
        assert judged.answer is Answer.NON_ANSWER, judged.why
