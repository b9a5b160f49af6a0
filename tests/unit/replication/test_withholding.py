"""replication.withholding against a deliberately misbehaving originator (a fake peer over a
real committed log): signed holdings that leave a committed id out are reported once and
prove it; honest holdings, UNIMPLEMENTED and short non-answers file nothing; a non-answer
that outlasts the patience is filed as an accusation, once."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from tests.unit.usecases.fakes import FixedClock
from tests.withholding_log import CommittedLog, Edit, leaving_out
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.core import merkle
from xnode.core.crypto import SigningKey
from xnode.core.evidence import why_unproven
from xnode.core.misbehavior import WITHHOLDING, WITHHOLDING_ACCUSATION
from xnode.core.reconciliation import Fingerprint, SequenceRange
from xnode.core.withholding import account, sign_holdings
from xnode.replication.withholding import HoldingsUnanswered, WithholdingCheck
from xnode_api.withholding.v1 import withholding_pb2 as wh

KEY = SigningKey.generate()
NODE = 100
NOW_S = time.time_ns() // 10**9
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

    async def signed_holdings(self, originator: int, first: int, last: int) -> wh.SignedHoldings:
        self.asked.append((first, last))
        if self.refusal is not None:
            raise HoldingsUnanswered(f"{self.refusal}: no", self.refusal)
        if self.budget_ids is None:
            return LOG.holdings(self.edit)
        upto = min(last, first + self.budget_ids - 1)
        held = [h for h in LOG.held() if first <= h.sequence_id <= upto]
        unsigned = account(NODE, first, upto, LOG.size, held, LOG.now_ns)
        if self.edit is not None:
            self.edit(unsigned)
        return sign_holdings(KEY, unsigned)

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
    keys = {NODE: [KEY.public_key]}
    check = WithholdingCheck(recorder, keys.__getitem__, clock or FixedClock(NOW_S), patience_s)
    return check, recorder


async def test_holdings_leaving_out_a_committed_id_are_reported_once() -> None:
    check, recorder = _check()
    peer = Originator(edit=leaving_out(LOG, S))
    assert await check.check(peer, NODE, LOG.checkpoint, [S], {}) == 1
    assert await check.check(peer, NODE, LOG.checkpoint, [S], {}) == 0
    (report,) = recorder.reports
    assert int(report.type) == WITHHOLDING and report.misbehaving_node_id == NODE
    assert why_unproven(report, {NODE: [KEY.public_key]}) is None


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
    assert why_unproven(report, {NODE: [KEY.public_key]}) is None


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


async def test_a_lasting_non_answer_is_an_accusation_and_unimplemented_never() -> None:
    clock = FixedClock(NOW_S)
    check, recorder = _check(clock)
    healing, older = Originator(refusal="UNAVAILABLE"), Originator(refusal="UNIMPLEMENTED")
    for _ in range(2):
        assert await check.check(healing, NODE, LOG.checkpoint, [S], {}) == 0
        assert await check.check(older, NODE, LOG.checkpoint, [S + 1], {}) == 0
        clock.now += 30
    assert recorder.reports == []  # 60 s of patience not yet spent
    assert await check.check(healing, NODE, LOG.checkpoint, [S], {}) == 1
    clock.now += 3600
    assert await check.check(older, NODE, LOG.checkpoint, [S + 1], {}) == 0
    (report,) = recorder.reports
    assert int(report.type) == WITHHOLDING_ACCUSATION
    assert "carries no proof" in str(why_unproven(report, {NODE: [KEY.public_key]}))


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
