"""Withholding found by repair (xnode.core.withholding): when a repair from an originator
itself leaves sequence ids unserved that the originator's checkpoint held here covers (gaps,
or losses here that the scrub or the loss windows found), the originator is asked to account
for them (HoldingsApi, signed). Holdings that leave one out, or call it expired before the
expiry its leaf commits to, are filed as a WITHHOLDING report that proves itself. Anything
else (named expired, served after all, UNAVAILABLE while it heals a loss, a peer without the
extension, a network fault) proves nothing: a non-answer is no proof, and an honest
originator is never reported with one. A non-answer that lasts (`patience_s`, far beyond the
minute an honest node takes to heal a loss) is filed as a WITHHOLDING_ACCUSATION, for the
council's judgement; a peer that does not serve HoldingsApi (UNIMPLEMENTED) is never
accused."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import structlog
from google.protobuf.message import DecodeError

from xnode.core.checkpoints import Checkpoint
from xnode.core.clock import SYSTEM_CLOCK, Clock
from xnode.core.reconciliation import SequenceRange, runs
from xnode.core.withholding import (
    MAX_HOLDINGS_SPAN,
    PATIENCE_S,
    accusation_report,
    why_not_withheld,
    withholding_report,
)
from xnode.replication.ports import MisbehaviorRecorder
from xnode_api.withholding.v1 import withholding_pb2 as wh

if TYPE_CHECKING:  # anti_entropy, which calls this, defines the repair peer
    from xnode.replication.anti_entropy import RepairPeer

log = structlog.get_logger(__name__)

MAX_CHECKED = MAX_HOLDINGS_SPAN  # unserved sequence ids looked into per repair


@runtime_checkable
class HoldingsPeer(Protocol):
    """A repair peer that can ask for signed holdings (GrpcRepairPeer; bench and test peers
    may not)."""

    async def signed_holdings(self, originator: int, first: int, last: int) -> wh.SignedHoldings:
        """Raises HoldingsUnanswered when the peer signs nothing."""
        ...


class HoldingsUnanswered(Exception):
    """The peer signed no holdings: str() says how it answered (a status, a timeout);
    `code` is the gRPC status name."""

    def __init__(self, answer: str, code: str) -> None:
        super().__init__(answer)
        self.code = code


def _spans(sequence_ids: Sequence[int]) -> list[SequenceRange]:
    out = []
    for run in runs(sequence_ids):
        for first in range(run.first, run.last + 1, MAX_HOLDINGS_SPAN):
            out.append(SequenceRange(first, min(first + MAX_HOLDINGS_SPAN - 1, run.last)))
    return out


def _accounted_up_to(holdings: wh.SignedHoldings, first: int, last: int) -> int:
    """How far an account asked for first..last goes: its own `last` when the originator's
    byte budget cut it (never less than `first`, so asking again moves on), else `last`."""
    try:
        signed_last = wh.UnsignedHoldings.FromString(holdings.unsigned_holdings).last
    except DecodeError:
        return last  # judged (and found no proof) as it is
    return max(first, min(signed_last, last))


class WithholdingCheck:
    """Files at most one report per (originator, sequence id) while the node runs."""

    def __init__(
        self,
        reports: MisbehaviorRecorder,
        keys: Callable[[int], Collection[bytes]],
        clock: Clock = SYSTEM_CLOCK,
        patience_s: float | None = PATIENCE_S,
    ) -> None:
        """`patience_s` None: a non-answer is never filed (a client's reports: nodes take no
        WITHHOLDING_ACCUSATION from clients)."""
        self._reports = reports
        self._keys = keys
        self._clock = clock
        self._patience_ns = None if patience_s is None else int(patience_s * 1e9)
        self._settled: set[tuple[int, int]] = set()
        self._unanswered_since: dict[tuple[int, int], int] = {}

    def unsettled(self, originator: int, sequence_ids: Collection[int]) -> list[int]:
        """Those of `sequence_ids` not yet accounted for or filed: worth asking again."""
        return sorted(s for s in sequence_ids if (originator, s) not in self._settled)

    async def check(
        self,
        peer: RepairPeer,
        originator: int,
        checkpoint: Checkpoint | None,
        unserved: Collection[int],
        listed: dict[int, bytes],
    ) -> int:
        """Reports filed about `unserved` (sequence ids the originator `peer` did not serve
        in this repair; `listed`: leaves it listed for them, where it did)."""
        if peer.node_id != originator or checkpoint is None:
            return 0
        if not isinstance(peer, HoldingsPeer):
            return 0
        unsettled = self.unsettled(originator, unserved)
        wanted = [s for s in unsettled if s <= checkpoint.tree_size][:MAX_CHECKED]
        if not wanted:
            return 0
        return await self._check(peer, peer, originator, checkpoint, wanted, listed)

    async def _check(
        self,
        peer: RepairPeer,
        asker: HoldingsPeer,
        originator: int,
        checkpoint: Checkpoint,
        wanted: list[int],
        listed: dict[int, bytes],
    ) -> int:
        leaves = {s: listed[s] for s in wanted if s in listed}
        unlisted = [s for s in wanted if s not in leaves]
        if unlisted:
            leaves.update(await peer.leaves(originator, runs(unlisted)))
        wanted = [s for s in wanted if s in leaves]
        ends = [SequenceRange(s, s) for s in wanted]
        paths = await peer.run_proofs(originator, ends, checkpoint.tree_size)
        proofs = {s: first for s, (first, _) in zip(wanted, paths, strict=True)}
        filed = 0
        for span in _spans(wanted):
            commitments = [
                wh.Commitment(
                    checkpoint=checkpoint.signed,
                    sequence_id=s,
                    leaf_hash=leaves[s],
                    inclusion_proof=proofs[s],
                )
                for s in wanted
                if span.first <= s <= span.last
            ]
            first = span.first
            while commitments:
                try:
                    holdings = await asker.signed_holdings(originator, first, span.last)
                except HoldingsUnanswered as exc:
                    log.info("holdings_unanswered", originator=originator, answer=str(exc))
                    if exc.code == "UNIMPLEMENTED":
                        return filed  # a peer without the extension: nothing to ask it
                    for commitment in commitments:
                        filed += await self._unanswered(originator, commitment, str(exc))
                    break
                # An account its byte budget cut goes to its own `last`: ask again past it.
                upto = _accounted_up_to(holdings, first, span.last)
                for commitment in [c for c in commitments if c.sequence_id <= upto]:
                    filed += await self._judge(originator, commitment, holdings)
                commitments = [c for c in commitments if c.sequence_id > upto]
                first = upto + 1
        return filed

    async def _unanswered(self, originator: int, commitment: wh.Commitment, answer: str) -> int:
        key = (originator, commitment.sequence_id)
        now = self._clock.now_ns()
        since = self._unanswered_since.setdefault(key, now)
        if self._patience_ns is None or now - since < self._patience_ns:
            return 0
        self._settled.add(key)
        report = accusation_report(originator, commitment, answer, now, now)
        detail = f"sequence id {commitment.sequence_id} unaccounted for since {since}: {answer}"
        await self._reports.record(report, detail)
        return 1

    async def _judge(
        self, originator: int, commitment: wh.Commitment, holdings: wh.SignedHoldings
    ) -> int:
        proof = wh.WithholdingProof(commitment=commitment, holdings=holdings)
        failure = why_not_withheld(proof, originator, self._keys(originator))
        self._settled.add((originator, commitment.sequence_id))
        self._unanswered_since.pop((originator, commitment.sequence_id), None)
        if failure is not None:
            log.debug(
                "withholding_not_proven",
                originator=originator,
                sequence_id=commitment.sequence_id,
                why=failure,
            )
            return 0
        report = withholding_report(originator, commitment, holdings, self._clock.now_ns())
        await self._reports.record(report, f"sequence id {commitment.sequence_id} withheld")
        return 1
