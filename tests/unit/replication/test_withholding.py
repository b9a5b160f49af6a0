"""replication.withholding against a deliberately misbehaving originator (a fake peer over a
real committed log): signed holdings that leave a committed id out are reported once and
prove it, with the question they answer; honest holdings and short non-answers file
nothing; a non-answer (a status, UNIMPLEMENTED included, or a signed reply that does not
hold it to anything) that outlasts the patience is filed as an accusation, once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tests.support.withholding_log import CommittedLog, Edit, leaving_out
from tests.unit.replication.test_anti_entropy import KEY as ANTI_ENTROPY_KEY
from tests.unit.replication.test_anti_entropy import Side, Store, _nothing, checkpoint_of
from tests.unit.replication.test_anti_entropy import signed as signed_anti_entropy
from tests.unit.usecases.fakes import FixedClock
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.core import merkle
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import IndexedEnvelope
from xnode.core.evidence import why_unproven
from xnode.core.leaves import HeldLeaf
from xnode.core.misbehavior import WITHHOLDING, WITHHOLDING_ACCUSATION
from xnode.core.reconciliation import Fingerprint, SequenceRange
from xnode.core.withholding import account, extended, sign_holdings
from xnode.replication.anti_entropy import Repair
from xnode.replication.ingest import IngestContext, OriginatorLog
from xnode.replication.verifiers import Verifiers
from xnode.replication.withholding import HoldingsUnanswered, WithholdingCheck
from xnode_api.withholding.v1 import withholding_pb2 as wh

KEY = SigningKey.generate()
NODE = 100
NOW_S = 1_790_000_000
ASKER = 200
ASKER_KEY = SigningKey.generate()
LOG = CommittedLog(KEY, NODE, 8, NOW_S * 10**9)
S = 5


@dataclass
class Originator:
    """Node 100 as repair sees it: honest logs and proofs, holdings as scripted."""

    edit: Edit | None = None
    refusal: str | None = None  # a status name: answers that instead of holdings
    node_id: int = NODE
    bytes_exchanged: int = 0
    asked: list[tuple[int, int]] = field(default_factory=list)
    budget_ids: int | None = None  # its byte budget cuts each account after so many ids
    questions: list[wh.SignedQuestion | None] = field(default_factory=list)

    async def leaves(
        self, originator: int, ranges: Sequence[SequenceRange]
    ) -> list[tuple[int, bytes]]:
        return [(s, LOG.leaves[s - 1]) for r in ranges for s in range(r.first, r.last + 1)]

    async def run_proofs(
        self, originator: int, runs: Sequence[SequenceRange], tree_size: int
    ) -> list[tuple[list[bytes], list[bytes]]]:
        def proof(s: int) -> list[bytes]:
            return merkle.inclusion_proof(s - 1, tree_size, LOG.perfect)

        return [(proof(r.first), proof(r.last)) for r in runs]

    async def signed_holdings(
        self, originator: int, first: int, last: int, question: wh.SignedQuestion | None = None
    ) -> wh.SignedHoldings:
        self.asked.append((first, last))
        self.questions.append(question)
        if self.refusal is not None:
            raise HoldingsUnanswered(f"{self.refusal}: no", self.refusal)
        upto = last if self.budget_ids is None else min(last, first + self.budget_ids - 1)
        return LOG.holdings(self.edit, question=question, span=(first, upto))

    async def fingerprints(
        self, originator: int, ranges: Sequence[SequenceRange]
    ) -> list[Fingerprint]:
        raise AssertionError("not asked")

    async def envelopes(self, originator: int, run: SequenceRange) -> list[bytes]:
        raise AssertionError("not asked")


@dataclass
class Recorder:
    reports: list[mb.UnsignedMisbehaviorReport] = field(default_factory=list)

    async def record(self, unsigned: mb.UnsignedMisbehaviorReport, detail: str) -> None:
        self.reports.append(unsigned)


def _check(
    clock: FixedClock | None = None, patience_s: float | None = 60.0
) -> tuple[WithholdingCheck, Recorder]:
    recorder = Recorder()
    keys = {NODE: KEY.public_key, ASKER: ASKER_KEY.public_key}
    clock = clock or FixedClock(NOW_S)
    check = WithholdingCheck(recorder, lambda: keys, (ASKER, ASKER_KEY), clock, patience_s)
    return check, recorder


REGISTRY = {NODE: [KEY.public_key], ASKER: [ASKER_KEY.public_key]}


async def test_holdings_leaving_out_a_committed_id_are_reported_once() -> None:
    check, recorder = _check()
    peer = Originator(edit=leaving_out(LOG, S))
    assert await check.check(peer, NODE, LOG.checkpoint, [S], {}) == 1
    assert await check.check(peer, NODE, LOG.checkpoint, [S], {}) == 0
    (report,) = recorder.reports
    assert int(report.type) == WITHHOLDING and report.misbehaving_node_id == NODE
    assert why_unproven(report, REGISTRY) is None
    # The question it answered, signed by the asker at its own time, is in the proof.
    question = wh.Question.FromString(extended(report).withholding.question.unsigned_question)
    assert (question.asker_node_id, question.asked_ns) == (ASKER, NOW_S * 10**9)


async def test_accounts_their_byte_budget_cut_are_asked_again_past_their_last() -> None:
    """An account that goes to its own `last` only settles nothing beyond it: the rest of
    the span is asked again, an honest originator is never reported, a withholder is."""
    check, recorder = _check()
    honest = Originator(budget_ids=2)
    assert await check.check(honest, NODE, LOG.checkpoint, [3, 4, 5, 6, 7], {}) == 0
    assert honest.asked == [(3, 7), (5, 7), (7, 7)]
    assert recorder.reports == []
    check, recorder = _check()
    withholder = Originator(edit=leaving_out(LOG, 6), budget_ids=2)
    assert await check.check(withholder, NODE, LOG.checkpoint, [3, 4, 5, 6, 7], {}) == 1
    (report,) = recorder.reports
    assert why_unproven(report, REGISTRY) is None


async def test_honest_holdings_another_peer_or_no_checkpoint_file_nothing() -> None:
    check, recorder = _check()
    honest = Originator()
    assert await check.check(honest, NODE, LOG.checkpoint, [S], {}) == 0
    relay = Originator(edit=leaving_out(LOG, S), node_id=200)
    assert await check.check(relay, NODE, LOG.checkpoint, [S], {}) == 0
    assert await check.check(relay, NODE, None, [S], {}) == 0
    beyond = Originator(edit=leaving_out(LOG, S))
    assert await check.check(beyond, NODE, LOG.checkpoint, [9], {}) == 0
    assert recorder.reports == [] and relay.asked == beyond.asked == []


async def test_a_lasting_non_answer_is_an_accusation_unimplemented_included() -> None:
    """A node that signs xnode's checkpoints serves HoldingsApi: UNIMPLEMENTED from it is a
    non-answer like any other."""
    clock = FixedClock(NOW_S)
    check, recorder = _check(clock)
    healing, older = Originator(refusal="UNAVAILABLE"), Originator(refusal="UNIMPLEMENTED")
    for _ in range(2):
        assert await check.check(healing, NODE, LOG.checkpoint, [S], {}) == 0
        assert await check.check(older, NODE, LOG.checkpoint, [S + 1], {}) == 0
        clock.now += 30
    assert recorder.reports == []  # 60 s of patience not yet spent
    assert await check.check(healing, NODE, LOG.checkpoint, [S], {}) == 1
    assert await check.check(older, NODE, LOG.checkpoint, [S + 1], {}) == 1
    assert [int(r.type) for r in recorder.reports] == [WITHHOLDING_ACCUSATION] * 2
    for report in recorder.reports:
        assert "carries no proof" in str(why_unproven(report, REGISTRY))


async def test_an_originator_that_answers_in_time_is_not_accused() -> None:
    clock = FixedClock(NOW_S)
    check, recorder = _check(clock)
    peer = Originator(refusal="UNAVAILABLE")
    assert await check.check(peer, NODE, LOG.checkpoint, [S], {}) == 0
    peer.refusal = None  # healed: its holdings serve S
    clock.now += 30
    assert await check.check(peer, NODE, LOG.checkpoint, [S], {}) == 0
    clock.now += 3600
    assert await check.check(peer, NODE, LOG.checkpoint, [S], {}) == 0
    assert recorder.reports == []


async def test_without_patience_a_non_answer_is_never_filed_and_stays_unsettled() -> None:
    clock = FixedClock(NOW_S)
    check, recorder = _check(clock, patience_s=None)  # a client's: nodes take no accusation
    healing = Originator(refusal="UNAVAILABLE")
    for _ in range(3):
        assert await check.check(healing, NODE, LOG.checkpoint, [S], {}) == 0
        clock.now += 3600
    assert recorder.reports == [] and len(healing.asked) == 3
    assert check.unsettled(NODE, [S, S + 1]) == [S, S + 1]
    assert await check.check(Originator(edit=leaving_out(LOG, S)), NODE, LOG.checkpoint, [S], {})
    assert check.unsettled(NODE, [S, S + 1]) == [S + 1]


def _shorter(unsigned: wh.UnsignedHoldings) -> None:
    unsigned.log_size = S - 1  # below S and its own checkpoint


def _unasked(unsigned: wh.UnsignedHoldings) -> None:
    unsigned.question_hash = b""  # its own time instead of the question's
    unsigned.answered_ns = 2**62
    leaving_out(LOG, S)(unsigned)
    unsigned.expired.add(sequence_id=S, expiry_unixtime=1)


async def test_signed_replies_that_hold_it_to_nothing_are_non_answers_not_settled() -> None:
    """A log size below its own checkpoint, or an account that answers no question: never
    settled, asked again, and after the patience an accusation."""
    for edit in (_shorter, _unasked):
        clock = FixedClock(NOW_S)
        check, recorder = _check(clock)
        peer = Originator(edit=edit)
        assert await check.check(peer, NODE, LOG.checkpoint, [S], {}) == 0
        assert check.unsettled(NODE, [S]) == [S]
        clock.now += 61
        assert await check.check(peer, NODE, LOG.checkpoint, [S], {}) == 1
        assert [int(r.type) for r in recorder.reports] == [WITHHOLDING_ACCUSATION]


@dataclass
class Silent(Originator):
    """An originator that will not list or prove the leaves it committed to."""

    async def leaves(
        self, originator: int, ranges: Sequence[SequenceRange]
    ) -> list[tuple[int, bytes]]:
        return []

    async def run_proofs(
        self, originator: int, runs: Sequence[SequenceRange], tree_size: int
    ) -> list[tuple[list[bytes], list[bytes]]]:
        return [([bytes(32)], [bytes(32)]) for _ in runs]


async def test_the_commitment_comes_from_peers_holding_its_log_when_it_will_not_list_it() -> None:
    """The accused lists nothing and proves garbage: the commitment is taken from a peer's
    copy of its log (another node's checkpoint-covered leaves), and the proof stands."""
    copy = Originator(node_id=300)
    recorder = Recorder()
    keys = {NODE: KEY.public_key, ASKER: ASKER_KEY.public_key}
    check = WithholdingCheck(
        recorder, lambda: keys, (ASKER, ASKER_KEY), FixedClock(NOW_S), 60.0, lambda: [copy]
    )
    assert await check.check(Silent(edit=leaving_out(LOG, S)), NODE, LOG.checkpoint, [S], {}) == 1
    (report,) = recorder.reports
    assert why_unproven(report, REGISTRY) is None
    alone, _ = _check()  # with no peer to take it from, nothing can be shown
    assert await alone.check(Silent(edit=leaving_out(LOG, S)), NODE, LOG.checkpoint, [S], {}) == 0


class Hiding(Side):
    """Originator 100 with envelope `hidden` gone from everything it shows (fingerprints,
    listings, proofs), leaving it out of the holdings it signs."""

    def __init__(self, envelopes: dict[int, IndexedEnvelope], hidden: int) -> None:
        super().__init__({s: e for s, e in envelopes.items() if s != hidden})
        self.node_id = NODE
        self.hidden = hidden
        self.full = envelopes

    async def signed_holdings(
        self, originator: int, first: int, last: int, question: wh.SignedQuestion | None = None
    ) -> wh.SignedHoldings:
        held = [
            HeldLeaf(NODE, s, e.leaf or b"", e.expiry, e.raw)
            for s, e in self.full.items()
            if first <= s <= last
        ]
        unsigned = account(NODE, first, last, len(self.full), held, NOW_S * 10**9, question)
        kept = [raw for raw in unsigned.envelopes if raw != self.full[self.hidden].raw]
        del unsigned.envelopes[:]
        unsigned.envelopes.extend(kept)
        return sign_holdings(ANTI_ENTROPY_KEY, unsigned)


async def test_repair_puts_every_id_its_checkpoint_covers_and_it_lacks_to_the_originator() -> None:
    """The originator's fingerprints agree with this node's (both lack S), so nothing it
    shows reveals S; the checkpoint accepted here covers S and nothing is held for it: the
    originator is asked, and its account, with the commitment from a peer's copy, proves it."""
    full = {s: signed_anti_entropy(s) for s in range(1, 11)}
    here = {s: e for s, e in full.items() if s != S}
    side = Side(here)
    side.checkpoint = checkpoint_of(full)
    store = Store(side, here)
    keys = {NODE: ANTI_ENTROPY_KEY.public_key, ASKER: ASKER_KEY.public_key}
    ctx = IngestContext(store, Recorder(), _nothing, "t", lambda: keys, Verifiers(1))
    target = OriginatorLog(NODE, None, ctx)
    recorder = Recorder()
    copy = Side(full)
    check = WithholdingCheck(
        recorder, lambda: keys, (ASKER, ASKER_KEY), FixedClock(NOW_S), 60.0, lambda: [copy]
    )

    async def no_fork(originator: int, stored: bytes, other: bytes) -> None:
        raise AssertionError("no fork here")

    repair = Repair(side, store, lambda _: target, no_fork, withholding=check)
    accused = Hiding(full, S)
    outcome = await repair.repair(accused, NODE)
    assert outcome.wanted == 0  # its fingerprints showed nothing to fetch
    (report,) = recorder.reports
    assert int(report.type) == WITHHOLDING
    assert why_unproven(report, {n: [k] for n, k in keys.items()}) is None
