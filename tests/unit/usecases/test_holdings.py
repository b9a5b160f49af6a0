"""usecases.holdings: the account answers the asker's question at the asker's time and names
it; a question about another range, or one whose time is further from this node's clock
than the skew allows, is refused with a message saying which."""

from __future__ import annotations

import pytest

from tests.support.withholding_log import CommittedLog
from tests.unit.usecases.fakes import FixedClock
from xnode.core.crypto import SigningKey, keccak256
from xnode.core.errors import Reason, Rejected
from xnode.core.leaves import HeldLeaf
from xnode.core.withholding import QUESTION_SKEW_NS, Healing, ask
from xnode.usecases.holdings import Holdings
from xnode_api.withholding.v1 import withholding_pb2 as wh

KEY, ASKER_KEY = SigningKey(b"\x51" * 32), SigningKey(b"\x52" * 32)
NOW_S = 1_790_000_000
LOG = CommittedLog(KEY, 100, 6, NOW_S * 10**9)


class Held:
    def __init__(self, gone: frozenset[int]) -> None:
        self._rows = LOG.held(gone)

    async def held_within(
        self, originator: int, first: int, last: int, budget: int
    ) -> tuple[list[HeldLeaf], bool]:
        rows = [r for r in self._rows if r.originator_node_id == originator]
        return [r for r in rows if first <= r.sequence_id <= last], False

    async def highest_leaf(self, originator: int) -> int:
        return LOG.size


def _holdings(gone: frozenset[int] = frozenset(), now_s: int = NOW_S) -> Holdings:
    held = Held(gone)
    return Holdings(100, KEY, held, held, FixedClock(now_s))


async def test_the_account_answers_the_question_at_the_asker_s_time() -> None:
    """Envelope 3 pruned: named expired (with its opening) only when the question's time is
    past its expiry; at an earlier question, the node signs nothing (it is healing)."""
    expiry = LOG.expiry(3)
    late = ask(ASKER_KEY, 200, 100, 1, 6, (expiry + 1) * 10**9)
    signed, _ = await _holdings(frozenset({3}), expiry + 60).signed(100, 1, 6, late)
    account = wh.UnsignedHoldings.FromString(signed.unsigned_holdings)
    assert account.question_hash == keccak256(late.unsigned_question)
    ((named),) = account.expired
    assert (named.sequence_id, named.content_hash) == (3, LOG.content_hash(3))
    early = ask(ASKER_KEY, 200, 100, 1, 6, (expiry - 1) * 10**9)
    with pytest.raises(Healing):
        await _holdings(frozenset({3}), expiry + 60 - 120).signed(100, 1, 6, early)


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        (ask(ASKER_KEY, 200, 100, 1, 5, NOW_S * 10**9), "the request node 100's 1..6"),
        (ask(ASKER_KEY, 200, 100, 1, 6, NOW_S * 10**9 - QUESTION_SKEW_NS - 10**9), "-301 s off"),
        (ask(ASKER_KEY, 200, 100, 1, 6, NOW_S * 10**9 + QUESTION_SKEW_NS + 10**9), "+301 s off"),
        (wh.SignedQuestion(unsigned_question=b"\xff"), "question does not decode"),
    ],
)
async def test_a_question_of_another_range_or_time_is_refused(
    question: wh.SignedQuestion, expected: str
) -> None:
    with pytest.raises(Rejected) as refused:
        await _holdings().signed(100, 1, 6, question)
    assert refused.value.reason is Reason.MALFORMED
    assert expected in refused.value.detail
