"""Storing what peers send: verification in worker threads, then, one batch at a time per
originator, order checks, an idempotent insert, forks settled by xnode.core.forks (every
node keeps the same version in its log) and live delivery.

Every stream that carries an originator's envelopes (its direct stream, or fallback streams
through other peers) stores through that originator's OriginatorLog, so they deduplicate
against each other and the order checks see one log."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

import structlog
from google.protobuf.message import DecodeError

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.core import forks, misbehavior
from xnode.core.clock import SYSTEM_CLOCK, Clock
from xnode.core.envelopes import IndexedEnvelope, StoredEnvelope
from xnode.core.fees import FeeSchedule
from xnode.core.rule_epochs import naming_epoch
from xnode.core.verification import (
    InvalidEnvelope,
    Position,
    Verdict,
    order_problem,
    verify_batch,
)
from xnode.observability.metrics import (
    REPLICATION_LAG_SECONDS,
    REPLICATION_LAG_SEQUENCE_IDS,
    REPLICATION_RECEIVED,
    REPLICATION_REJECTED,
)
from xnode.replication.ports import MisbehaviorRecorder, ReplicaStore
from xnode.replication.verifiers import Verifiers

log = structlog.get_logger(__name__)

OnStored = Callable[[list[StoredEnvelope]], Awaitable[None]]
# (originator, peer that served the envelopes) -> the originator's watermark: the tree size
# of its newest signed checkpoint (0 when none is known)
Watermark = Callable[[int, int], Awaitable[int]]
# Below this many envelopes a batch is verified in one thread: splitting costs more.
MIN_SPLIT = 64
# Up to this many are verified on the event loop itself.
INLINE_MAX = 4


@dataclass
class IngestContext:
    """What every OriginatorLog shares."""

    store: ReplicaStore
    reports: MisbehaviorRecorder
    on_stored: OnStored
    notice_token: str
    keys: Callable[[], Mapping[int, bytes]]
    verifiers: Verifiers
    clock: Clock = SYSTEM_CLOCK
    # Published fee schedules per originator (replication.fees); none: fees are not checked
    schedules: Callable[[], Mapping[int, FeeSchedule]] = dict
    watermark: Watermark | None = None
    # (originator, sequence id): a fork was settled there; the checkpoints stored from there
    # are judged again (usecases.logs.CheckpointIntake.settle)
    fork_settled: Callable[[int, int], Awaitable[None]] | None = None


def _split(raws: Sequence[bytes], parts: int) -> list[Sequence[bytes]]:
    if parts <= 1 or len(raws) < MIN_SPLIT:
        return [raws]
    size = -(-len(raws) // parts)
    return [raws[i : i + size] for i in range(0, len(raws), size)]


def _proof(raws: Sequence[bytes]) -> list[bytes]:
    """Envelopes that decode (a report can carry only those), at most a report's worth."""
    kept: list[bytes] = []
    for raw in raws[: misbehavior.MAX_REPORT_ENVELOPES]:
        try:
            envelopes_pb2.OriginatorEnvelope.FromString(raw)
        except DecodeError:
            continue
        kept.append(raw)
    return kept


class OriginatorLog:
    def __init__(self, originator: int, position: Position | None, ctx: IngestContext) -> None:
        self.originator = originator
        self.position = position
        self._ctx = ctx
        self._lock = asyncio.Lock()
        self._head = position.sequence_id if position else 0
        self._label = str(originator)
        self._committed = 0  # the originator's watermark, refreshed when an order check fails

    def _now_ns(self) -> int:
        return self._ctx.clock.now_ns()

    @property
    def sequence_id(self) -> int:
        return self.position.sequence_id if self.position else 0

    def start_verify(
        self, raws: Sequence[bytes], bulk: bool = False
    ) -> list[asyncio.Future[list[Verdict]]]:
        """Verification of `raws`, started now, in parts for the worker threads (`bulk`: the
        worker processes, when there are any); the parts' results, in order, are the
        verdicts. Callers keep several batches in flight so no worker waits for another's
        part."""
        keys = self._ctx.keys()
        schedule = self._ctx.schedules().get(self.originator)
        loop = asyncio.get_running_loop()
        if len(raws) <= INLINE_MAX:
            # Live traffic: a thread hop would cost more latency than verifying here.
            done: asyncio.Future[list[Verdict]] = loop.create_future()
            done.set_result(verify_batch(raws, keys, self.originator, schedule))
            return [done]
        verifiers = self._ctx.verifiers
        if bulk and verifiers.bulk is not None:
            # Only this originator's key crosses to the processes: the rest is never read.
            mine = {self.originator: keys[self.originator]} if self.originator in keys else {}
            try:
                return [
                    loop.run_in_executor(
                        verifiers.bulk, verify_batch, part, mine, self.originator, schedule
                    )
                    for part in _split(raws, verifiers.processes)
                ]
            except BrokenProcessPool as exc:  # a worker died (killed, out of memory)
                log.error("bulk_verifiers_broken", error=repr(exc), fallback="threads")
                verifiers.bulk_broken()
        return [
            loop.run_in_executor(
                verifiers.thread_pool, verify_batch, part, keys, self.originator, schedule
            )
            for part in _split(raws, verifiers.threads)
        ]

    def saw_head(self, sequence_id: int) -> None:
        """A peer says this originator has reached `sequence_id` (for the lag metrics)."""
        self._head = max(self._head, sequence_id)
        self._update_lag()

    def _update_lag(self) -> None:
        behind = max(0, self._head - self.sequence_id)
        REPLICATION_LAG_SEQUENCE_IDS.labels(self._label).set(behind)
        age = (self._now_ns() - self.position.originator_ns) / 1e9 if self.position else 0.0
        REPLICATION_LAG_SECONDS.labels(self._label).set(max(age, 0.0) if behind else 0.0)

    async def store(self, verdicts: Sequence[Verdict], source: int, direct: bool) -> None:
        async with self._lock:
            valid = await self._rejected(verdicts, source)
            fresh, forked = await self._checked(valid, direct, source)
            # Only envelopes new here: relays resend what is stored, and each copy would
            # file the same report again.
            await self._causal(await self._insert(fresh, forked), source)

    async def _causal(self, valid: Sequence[IndexedEnvelope], source: int) -> None:
        """One CAUSAL_ORDERING report per batch for envelopes that depend on their own
        originator's sequence id at or after their own (it cannot have seen it yet); they are
        stored anyway, as the XIP keeps misordered payloads."""
        ahead = [e for e in valid if e.depends_ahead]
        if not ahead:
            return
        report = misbehavior.safety_report(
            misbehavior.CAUSAL_ORDERING,
            self.originator,
            _proof([e.raw for e in ahead]),
            self._now_ns(),
        )
        first = ahead[0]
        detail = (
            f"{len(ahead)} envelope(s) from peer {source} depend on their originator's own "
            f"later sequence id: {first.sequence_id} depends on {first.depends_ahead}"
        )
        await self._ctx.reports.record(report, detail)

    async def _rejected(self, verdicts: Sequence[Verdict], source: int) -> list[IndexedEnvelope]:
        valid: list[IndexedEnvelope] = []
        blamed: dict[tuple[int, str], list[InvalidEnvelope]] = {}
        for v in verdicts:
            if isinstance(v, IndexedEnvelope):
                valid.append(v)
                continue
            REPLICATION_REJECTED.labels(self._label, v.reason.value).inc()
            culprit = self.originator if v.signed_by_originator else source
            blamed.setdefault((culprit, v.reason.value), []).append(v)
        # One report per culprit and reason per batch: a peer sending garbage in bulk must
        # not turn into a flood of reports.
        for (culprit, reason), bad in blamed.items():
            proof = _proof([b.raw for b in bad])
            report = misbehavior.safety_report(
                misbehavior.INVALID_PAYLOAD, culprit, proof, self._now_ns()
            )
            if proof:
                report = naming_epoch(report, proof[0])  # the rules it was judged by
            detail = (
                f"{len(bad)} envelope(s) from peer {source} rejected ({reason}): {bad[0].detail}"
            )
            await self._ctx.reports.record(report, detail)
        return valid

    async def _order_problem(
        self, previous: Position | None, env: IndexedEnvelope, now: int, direct: bool, source: int
    ) -> str | None:
        """The order check against the originator's watermark, refreshed (stored checkpoints,
        else the serving peer's newest) before anything is reported: envelopes expired or
        pruned below a checkpoint are no fault. Called once order_problem found a problem
        with the watermark known so far."""
        problem = order_problem(previous, env, now, direct, self._committed)
        if problem is None or self._ctx.watermark is None:
            return problem
        try:
            committed = await self._ctx.watermark(self.originator, source)
        except Exception as exc:  # no watermark to be had: judge by what is known
            log.info("watermark_unavailable", originator=self.originator, error=repr(exc))
            return problem
        self._committed = max(self._committed, committed)
        return order_problem(previous, env, now, direct, self._committed)

    async def _checked(
        self, valid: list[IndexedEnvelope], direct: bool, source: int
    ) -> tuple[list[IndexedEnvelope], list[IndexedEnvelope]]:
        """Order checks (report, then store anyway); of two versions of one sequence id in
        the batch, the one xnode.core.forks keeps goes on, the other is returned apart."""
        fresh: dict[int, IndexedEnvelope] = {}
        forked: list[IndexedEnvelope] = []
        previous = self.position
        now = self._now_ns()
        for env in sorted(valid, key=lambda e: e.sequence_id):
            prior = fresh.get(env.sequence_id)
            if prior is not None:
                if prior.raw != env.raw:
                    winner = forks.log_keeps(prior.raw, env.raw)
                    fresh[env.sequence_id] = prior if winner == prior.raw else env
                    forked.append(env if winner == prior.raw else prior)
                continue
            # Checked here first: a coroutine per envelope is measurable in a catch-up.
            problem = order_problem(previous, env, now, direct, self._committed)
            if problem is not None:
                problem = await self._order_problem(previous, env, now, direct, source)
            if problem is not None:
                proof = [previous.raw, env.raw] if previous and previous.raw else [env.raw]
                report = misbehavior.safety_report(
                    misbehavior.OUT_OF_ORDER, self.originator, proof, now
                )
                await self._ctx.reports.record(report, problem)
            fresh[env.sequence_id] = env
            if previous is None or env.sequence_id > previous.sequence_id:
                previous = Position(env.sequence_id, env.originator_ns, env.raw)
        return list(fresh.values()), forked

    async def _duplicate(self, first: bytes, second: bytes) -> None:
        report = misbehavior.safety_report(
            misbehavior.DUPLICATE_SEQUENCE_ID,
            self.originator,
            [first, second],
            self._now_ns(),
        )
        await self._ctx.reports.record(report, "two different envelopes share a sequence id")

    async def _insert(
        self, fresh: list[IndexedEnvelope], forked: list[IndexedEnvelope]
    ) -> list[IndexedEnvelope]:
        """Stores what is new; a version that differs from the stored one is a fork, settled
        by xnode.core.forks on every node alike. When the newcomer takes the stored one's
        place, live subscribers are told nothing: they were already sent that sequence id
        (one version of it), and queries serve the log's version from then on. Returns
        the envelopes new here."""
        if not fresh:
            return []
        ctx = self._ctx
        inserted = {seq for _, seq in await ctx.store.insert_received(fresh, ctx.notice_token)}
        if len(inserted) == len(fresh) and not forked:  # all new (a catch-up): no fork here
            kept = stored = fresh
        else:
            known = [e for e in fresh if e.sequence_id not in inserted]
            in_log = {e.sequence_id: e.raw for e in fresh}
            await self._forks(await self._differing(known) + forked, in_log)
            kept = [e for e in fresh if in_log[e.sequence_id] == e.raw]
            stored = [e for e in fresh if e.sequence_id in inserted]
        if kept and kept[-1].sequence_id > self.sequence_id:
            top = kept[-1]
            self.position = Position(top.sequence_id, top.originator_ns, top.raw)
        self._head = max(self._head, self.sequence_id)
        self._update_lag()
        if stored:
            REPLICATION_RECEIVED.labels(self._label).inc(len(stored))
            await ctx.on_stored([e.stored() for e in stored])
        return stored

    async def _differing(self, known: list[IndexedEnvelope]) -> list[IndexedEnvelope]:
        """Envelopes stored already with other bytes (one cheap read: relays resend a lot)."""
        if not known:
            return []
        existing = await self._ctx.store.stored_envelopes(
            self.originator, [e.sequence_id for e in known]
        )
        return [e for e in known if existing.get(e.sequence_id, e.raw) != e.raw]

    async def _forks(self, candidates: list[IndexedEnvelope], in_log: dict[int, bytes]) -> None:
        """DUPLICATE_SEQUENCE_ID with both signed envelopes, once per version first seen."""
        if not candidates:
            return
        resolutions = await self._ctx.store.resolve_forks(candidates)
        for env, fork in zip(candidates, resolutions, strict=True):
            if fork is None:
                continue
            in_log[env.sequence_id] = env.raw if fork.replaced else fork.previous
            if fork.new_evidence:
                await self._duplicate(fork.previous, env.raw)
            if (fork.replaced or fork.new_evidence) and self._ctx.fork_settled is not None:
                await self._settled(env.sequence_id)

    async def _settled(self, sequence_id: int) -> None:
        assert self._ctx.fork_settled is not None
        try:
            await self._ctx.fork_settled(self.originator, sequence_id)
        except Exception as exc:  # the fork itself is stored; the next fork settles again
            log.warning(
                "checkpoints_unsettled",
                originator=self.originator,
                sequence_id=sequence_id,
                error=repr(exc),
            )
