"""This originator's signed account of a range of its own log (xnode.core.withholding):
what a peer asks before it may report withholding. Signs nothing while a sequence id in the
range is lost or mismatches its leaf (core.withholding.Healing: the scrub and repair fetch it
back), so an honest node never signs an account that convicts it."""

from __future__ import annotations

from typing import Protocol

from xnode.core.clock import SYSTEM_CLOCK, Clock
from xnode.core.crypto import SigningKey
from xnode.core.errors import Reason, Rejected
from xnode.core.leaves import HeldLeaf
from xnode.core.sizes import DEFAULT_ANSWER_BUDGET_BYTES
from xnode.core.withholding import MAX_HOLDINGS_SPAN, account, sign_holdings
from xnode_api.withholding.v1 import withholding_pb2 as wh


class HeldLeaves(Protocol):
    """The leaves held with their envelopes (store.scrub.ScrubStore)."""

    async def held_within(
        self, originator: int, first: int, last: int, budget: int
    ) -> tuple[list[HeldLeaf], bool]:
        """The leaves first..last in order while their envelopes' bytes fit `budget`
        (always the first); and whether that left leaves out."""
        ...


class LogSize(Protocol):
    async def highest_leaf(self, originator: int) -> int: ...


class Holdings:
    def __init__(
        self,
        node_id: int,
        key: SigningKey,
        held: HeldLeaves,
        logs: LogSize,
        clock: Clock = SYSTEM_CLOCK,
        budget: int = DEFAULT_ANSWER_BUDGET_BYTES,
    ) -> None:
        """`budget`: the envelope bytes one account holds at most (core.sizes)."""
        self._budget = budget
        self._node_id = node_id
        self._key = key
        self._held = held
        self._logs = logs
        self._clock = clock

    def _check(self, originator: int, first: int, last: int) -> None:
        if originator != self._node_id:
            raise Rejected(
                Reason.WRONG_ORIGINATOR,
                f"node {self._node_id} accounts for its own log only, not node {originator}'s",
            )
        if not 1 <= first <= last:
            raise Rejected(Reason.MALFORMED, f"range {first}..{last}: need 1 <= first <= last")
        if last - first + 1 > MAX_HOLDINGS_SPAN:
            raise Rejected(
                Reason.LIMIT_EXCEEDED,
                f"{last - first + 1} sequence ids, the limit is {MAX_HOLDINGS_SPAN}",
            )

    async def signed(
        self, originator: int, first: int, last: int
    ) -> tuple[wh.SignedHoldings, bool]:
        """The signed account, and whether the byte budget cut it: then it accounts for
        first..its own `last` only (the last envelope that fit), and the asker asks again
        past it. Raises Rejected for a bad request, core.withholding.Healing while a loss in
        the range is being repaired."""
        self._check(originator, first, last)
        size = await self._logs.highest_leaf(originator)
        held: list[HeldLeaf] = []
        cut = False
        if first <= min(last, size):
            held, cut = await self._held.held_within(
                originator, first, min(last, size), self._budget
            )
        if cut:
            last = held[-1].sequence_id
        # Judged after the reads: an envelope pruned meanwhile had expired by then.
        answered_ns = self._clock.now_ns()
        signed = sign_holdings(self._key, account(originator, first, last, size, held, answered_ns))
        return signed, cut
