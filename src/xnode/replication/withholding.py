"""Withholding found by repair (xnode.core.withholding): sequence ids that the originator's
checkpoint accepted here covers and that this node holds no envelope for (gaps, whatever the
originator's fingerprints show, or losses the scrub or the loss windows found), and that the
originator itself does not serve, are put to it as a question signed by this node at its own
time (HoldingsApi). What it signs is judged (core.withholding.judge_holdings): a proof is
filed as a WITHHOLDING report; an account that settles the id (served, provably expired,
nothing to hold it to) ends the matter; anything else is a non-answer: a status (UNAVAILABLE
while it heals a loss, UNIMPLEMENTED: a node signing xnode checkpoints serves HoldingsApi), a
timeout, a reply that does not verify or answers another question, a log size below its own
checkpoint. A non-answer proves nothing, but one that lasts `patience_s` (far beyond the
minute an honest node takes to heal a loss) for the same id is filed as a
WITHHOLDING_ACCUSATION, for the council's judgement."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import structlog
from google.protobuf.message import DecodeError

from xnode.core.checkpoints import Checkpoint
from xnode.core.clock import SYSTEM_CLOCK, Clock
from xnode.core.crypto import SigningKey
from xnode.core.reconciliation import SequenceRange, runs
from xnode.core.withholding import (
    MAX_HOLDINGS_SPAN,
    PATIENCE_S,
    Answer,
    accusation_report,
    ask,
    check_commitment,
    judge_holdings,
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

    async def signed_holdings(
        self, originator: int, first: int, last: int, question: wh.SignedQuestion | None = None
    ) -> wh.SignedHoldings:
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
        keys: Callable[[], Mapping[int, bytes]],
        asker: tuple[int, SigningKey] | None,
        clock: Clock = SYSTEM_CLOCK,
        patience_s: float | None = PATIENCE_S,
        others: Callable[[], Sequence[RepairPeer]] = list,
    ) -> None:
        """`keys`: the registry's keys; `asker`: the registered id and key questions are
        signed with (None: a client's questions carry no time, so only claims that need
        none are proven). `others`: the peers that hold copies of originators' logs, asked
        for the commitment when the accused will not list or prove its own leaf.
        `patience_s` None: a non-answer is never filed (a
        client's reports: nodes take no WITHHOLDING_ACCUSATION from clients)."""
        self._reports = reports
        self._keys = keys
        self._asker = asker
        self._others = others
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

    def pending(self, originator: int) -> list[int]:
        """Sequence ids of `originator` left unanswered so far: asked again each repair."""
        return sorted(s for o, s in self._unanswered_since if o == originator)

    async def _commitments(
        self,
        sources: Sequence[RepairPeer],
        originator: int,
        checkpoint: Checkpoint,
        wanted: list[int],
        listed: dict[int, bytes],
    ) -> dict[int, wh.Commitment]:
        """The checkpoint's commitment to each of `wanted`, its leaf and inclusion proof from
        the first source (the accused first, then the peers holding its log) whose answer
        verifies: what the accused will not list or prove, the others' copies of its log
        do."""
        key = self._keys().get(originator)
        keys = [key] if key is not None else []
        found: dict[int, wh.Commitment] = {}
        for source in sources:
            missing = [s for s in wanted if s not in found]
            if not missing:
                break
            try:
                leaves = {s: listed[s] for s in missing if s in listed}
                unlisted = [s for s in missing if s not in leaves]
                if unlisted:
                    leaves.update(await source.leaves(originator, runs(unlisted)))
                have = [s for s in missing if s in leaves]
                ends = [SequenceRange(s, s) for s in have]
                paths = await source.run_proofs(originator, ends, checkpoint.tree_size)
            except Exception as exc:  # a source down or refusing: the next one
                log.info(
                    "withholding_commitment_unavailable",
                    source=source.node_id,
                    error=repr(exc)[:200],
                )
                continue
            for s, (path, _) in zip(have, paths, strict=False):
                commitment = wh.Commitment(
                    checkpoint=checkpoint.signed,
                    sequence_id=s,
                    leaf_hash=leaves[s],
                    inclusion_proof=path,
                )
                try:
                    check_commitment(commitment, originator, keys)
                except ValueError:
                    continue  # not the checkpoint's leaf: another source may prove it
                found[s] = commitment
        return found

    async def _check(
        self,
        peer: RepairPeer,
        asker: HoldingsPeer,
        originator: int,
        checkpoint: Checkpoint,
        wanted: list[int],
        listed: dict[int, bytes],
    ) -> int:
        sources = [peer, *(p for p in self._others() if p.node_id != originator)]
        found = await self._commitments(sources, originator, checkpoint, wanted, listed)
        wanted = [s for s in wanted if s in found]
        filed = 0
        for span in _spans(wanted):
            commitments = [found[s] for s in wanted if span.first <= s <= span.last]
            first = span.first
            while commitments:
                question = self._question(originator, first, span.last)
                try:
                    holdings = await asker.signed_holdings(originator, first, span.last, question)
                except HoldingsUnanswered as exc:
                    log.info("holdings_unanswered", originator=originator, answer=str(exc))
                    for commitment in commitments:
                        filed += await self._unanswered(originator, commitment, str(exc))
                    break
                # An account its byte budget cut goes to its own `last`: ask again past it.
                upto = _accounted_up_to(holdings, first, span.last)
                for commitment in [c for c in commitments if c.sequence_id <= upto]:
                    filed += await self._judge(originator, commitment, holdings, question)
                commitments = [c for c in commitments if c.sequence_id > upto]
                first = upto + 1
        return filed

    def _question(self, originator: int, first: int, last: int) -> wh.SignedQuestion | None:
        """This node's signed question for the range, at its own time (None when it has no
        registered key to sign with)."""
        if self._asker is None:
            return None
        node_id, key = self._asker
        return ask(key, node_id, originator, first, last, self._clock.now_ns())

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
        self,
        originator: int,
        commitment: wh.Commitment,
        holdings: wh.SignedHoldings,
        question: wh.SignedQuestion | None,
    ) -> int:
        proof = wh.WithholdingProof(commitment=commitment, holdings=holdings, question=question)
        registry = {node: (key,) for node, key in self._keys().items()}
        judged = judge_holdings(proof, originator, registry)
        if judged.answer is Answer.NON_ANSWER:
            log.info(
                "holdings_unanswered",
                originator=originator,
                sequence_id=commitment.sequence_id,
                answer=judged.why,
            )
            return await self._unanswered(originator, commitment, judged.why)
        self._settled.add((originator, commitment.sequence_id))
        self._unanswered_since.pop((originator, commitment.sequence_id), None)
        if judged.answer is Answer.SETTLED:
            log.debug(
                "withholding_not_proven",
                originator=originator,
                sequence_id=commitment.sequence_id,
                why=judged.why,
            )
            return 0
        now = self._clock.now_ns()
        report = withholding_report(originator, commitment, holdings, now, question)
        await self._reports.record(report, f"sequence id {commitment.sequence_id} withheld")
        return 1
