"""Repair from any peer: per originator and peer, range-based reconciliation of the
committed logs (core.reconciliation.Session over LogApi fingerprints and leaves), then the
envelopes missing here fetched from that peer, checked and stored through the originator's
OriginatorLog like any replicated batch (idempotent; the tree grows when a gap fills).
Where a differing range lacks few ids here (NAME_MAX), this node names them from its own
tile index and fetches their envelopes at once, with no listing: gaps left by relays cost
one round of fingerprints. What arrived (verified, proven) must then make the range's two
fingerprints meet; a range it does not settle (a fork, an envelope expired or refused) is
listed or descends after the fetch, as any other.

Every fetched envelope is checked: the originator's signature (core.verification, in the
verifying threads, or processes for large repairs), the leaf the peer listed for it (or,
in a named range, the range's fingerprint over all that arrived, checked afterwards), and,
where a checkpoint of the originator stored here (verified on intake) covers it, the whole
contiguous run it belongs to against that checkpoint's root with the inclusion proofs of
the run's two ends (merkle.run_root; the proofs of every run in one GetRunProofs request,
asked while the envelopes are fetched). Runs are stored in order as they are checked.
A run the peer cannot prove is left for another peer; one that proves false is refused. A
leaf the peer holds whose envelope it no longer serves expired: nothing to fetch, no fault.
The same sequence id with two leaves is a fork: both envelopes go to `on_fork` (logged as
`fork_found`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from xnode.core import merkle
from xnode.core.checkpoints import Checkpoint, has_log
from xnode.core.clock import SYSTEM_CLOCK
from xnode.core.envelopes import IndexedEnvelope
from xnode.core.reconciliation import (
    Fingerprint,
    SequenceRange,
    Session,
    difference,
    runs,
    runs_of,
)
from xnode.core.verification import Verdict
from xnode.observability.metrics import REPAIR_ENVELOPES, REPAIR_ROUND_TRIPS
from xnode.observability.outage import DatabaseOutage
from xnode.replication.fork_sync import ForkPeer, ForkSync, OnFork, StoredBytes
from xnode.replication.ingest import OriginatorLog
from xnode.replication.losses import LossFinder
from xnode.replication.withholding import MAX_CHECKED, WithholdingCheck
from xnode.usecases.concurrency import all_or_cancel, end_if_cancelled
from xnode.usecases.logs import MAX_LEAVES, MAX_RANGES
from xnode.usecases.ports import StoreUnavailable

log = structlog.get_logger(__name__)

FETCH_CONCURRENCY = 8  # envelope fetches in flight per repair
# Runs are fetched in groups of about this many sequence ids, each group verified as one
# batch (few large batches: every hop to a worker process waits for the GIL here), proven
# and stored as it comes.
FETCH_SPAN = 1000
RAMP = (4, 2)  # the first groups take FETCH_SPAN // 4, then // 2 (the last ones: _span_limit)
STORE_BATCH = 1000  # stored while the groups after it are checked
GROUPS_AHEAD = 8  # groups in flight (fetched, being verified) ahead of the one stored
# From this many envelopes to fetch, a repair verifies them in the worker processes (when the
# node has any): below it, starting them would cost more than the threads lose to the GIL.
BULK_MIN = 1000
# A differing range where this node lacks at most this many ids is settled by naming them
# (core.reconciliation.Session.name_max): fetched at once, no listing, no descent.
NAME_MAX = 4096
FIRST_PASS_S = 10.0  # after start, the first repair pass waits at most this long
GAP_WINDOW = 65_536  # sequence ids of a log looked over for gaps per repair from its originator


class RepairPeer(Protocol):
    node_id: int
    bytes_exchanged: int

    async def fingerprints(
        self, originator: int, ranges: Sequence[SequenceRange]
    ) -> list[Fingerprint]: ...

    async def leaves(
        self, originator: int, ranges: Sequence[SequenceRange]
    ) -> list[tuple[int, bytes]]: ...

    async def run_proofs(
        self, originator: int, runs: Sequence[SequenceRange], tree_size: int
    ) -> list[tuple[list[bytes], list[bytes]]]: ...

    async def envelopes(self, originator: int, run: SequenceRange) -> list[bytes]: ...


class HeldLog(Protocol):
    """The committed logs held here (the part of usecases.logs.LogPort repair reads)."""

    async def tree_size(self, originator: int) -> int: ...

    async def highest_leaf(self, originator: int) -> int: ...

    async def fingerprints(
        self, originator: int, ranges: Sequence[SequenceRange]
    ) -> list[Fingerprint]: ...

    async def leaves(
        self, originator: int, ranges: Sequence[SequenceRange]
    ) -> list[tuple[int, bytes]]: ...

    async def absent(self, originator: int, ranges: Sequence[SequenceRange]) -> list[int]: ...

    async def lost(
        self, originator: int, ranges: Sequence[SequenceRange], now_unix: int, limit: int
    ) -> list[tuple[int, bytes]]: ...

    async def latest_checkpoint(self, originator: int) -> Checkpoint | None: ...


@dataclass
class Outcome:
    """What one repair of one originator's log from one peer did."""

    round_trips: int = 0
    wanted: int = 0
    stored: int = 0
    expired: int = 0
    lost: int = 0  # envelopes lost here (leaf held, not provably expired) asked for
    restored: int = 0  # of which the peer served, checked and stored
    rejected: int = 0
    unproven: int = 0
    forks: list[int] = field(default_factory=list)
    store_s: float = 0.0  # of which inserting (and growing the tree over filled gaps)


def _chunks(ranges: Sequence[SequenceRange], span_limit: int | None) -> list[list[SequenceRange]]:
    """Ranges in requests of at most MAX_RANGES ranges (and `span_limit` sequence ids)."""
    out: list[list[SequenceRange]] = [[]]
    span = 0
    for r in ranges:
        too_wide = span_limit is not None and span + r.span > span_limit
        if len(out[-1]) >= MAX_RANGES or (too_wide and out[-1]):
            out.append([])
            span = 0
        out[-1].append(r)
        span += r.span
    return [c for c in out if c]


def _span_limit(index: int, remaining: int) -> int:
    """How many sequence ids group `index` of a repair takes, `remaining` being left: the
    first two are small so the workers start while the rest are fetched, and so are the
    last ones, so that little is left to verify and store once the rest is done."""
    if index < len(RAMP):
        return max(1, FETCH_SPAN // RAMP[index])
    least = max(1, FETCH_SPAN // RAMP[0])
    return min(FETCH_SPAN, max(least, remaining - (FETCH_SPAN - least)))


def _groups(wanted: Iterable[SequenceRange]) -> list[list[SequenceRange]]:
    """The runs to fetch (adjacent ones joined, those crossing a group's end cut there) in
    groups of at most FETCH_SPAN sequence ids (fewer at both ends: _span_limit)."""
    pending = deque(runs_of(wanted))
    remaining = sum(r.span for r in pending)
    groups: list[list[SequenceRange]] = []
    while pending:
        limit = _span_limit(len(groups), remaining)
        group: list[SequenceRange] = []
        span = 0
        while pending and span < limit:
            r = pending.popleft()
            if r.span > limit - span:
                cut = r.first + limit - span
                pending.appendleft(SequenceRange(cut, r.last))
                r = SequenceRange(r.first, cut - 1)
            group.append(r)
            span += r.span
        remaining -= span
        groups.append(group)
    return groups


def _split_listed(ranges: Iterable[SequenceRange]) -> list[SequenceRange]:
    """Listed ranges no wider than one GetLeaves answer."""
    out: list[SequenceRange] = []
    for r in ranges:
        out += r.split(-(-r.span // MAX_LEAVES)) if r.span > MAX_LEAVES else [r]
    return out


class Repair:
    """Repairs originators' logs here from peers."""

    def __init__(
        self,
        logs: HeldLog,
        stored: StoredBytes,
        originator_log: Callable[[int], OriginatorLog],
        on_fork: OnFork,
        now_unix: Callable[[], int] = SYSTEM_CLOCK.now_s,
        withholding: WithholdingCheck | None = None,
    ) -> None:
        """`withholding`: when given, sequence ids an originator does not serve of its own
        committed log are looked into (replication.withholding)."""
        self._logs = logs
        self._stored = stored
        self._originator_log = originator_log
        self._on_fork = on_fork
        self._withholding = withholding
        self._gaps_from: dict[int, int] = {}  # originator -> where _uncovered looks next
        self.losses = LossFinder(logs, now_unix)

    async def _fingerprints(
        self, peer: RepairPeer, originator: int, asking: Sequence[SequenceRange]
    ) -> tuple[list[Fingerprint], list[Fingerprint]]:
        chunks = _chunks(asking, None)

        # Ours are read while the peer computes its own (one round trip, not two), each
        # side's requests in parallel: a wide round keeps both cores busy.
        # Not asyncio.gather: a failing peer would leave our reads running detached, on pool
        # connections a stopping node's pool waits for (usecases.concurrency).
        theirs, mine = await all_or_cancel(
            all_or_cancel(*(peer.fingerprints(originator, c) for c in chunks)),
            all_or_cancel(*(self._logs.fingerprints(originator, c) for c in chunks)),
        )
        return [f for c in mine for f in c], [f for c in theirs for f in c]

    async def _listed(
        self, peer: RepairPeer, originator: int, listed: Sequence[SequenceRange]
    ) -> tuple[dict[int, bytes], list[int]]:
        """Leaves the peer holds and this node lacks (sequence id -> leaf), and forks."""
        chunks = _chunks(_split_listed(listed), MAX_LEAVES)
        theirs_parts, mine_parts = await all_or_cancel(
            all_or_cancel(*(peer.leaves(originator, c) for c in chunks)),
            all_or_cancel(*(self._logs.leaves(originator, c) for c in chunks)),
        )  # ours read while the peer answers
        theirs = dict(leaf for part in theirs_parts for leaf in part)
        mine = dict(leaf for part in mine_parts for leaf in part)
        found = difference(mine, theirs)
        return {s: theirs[s] for s in found.missing_here}, found.forks

    async def reconcile(
        self, peer: RepairPeer, originator: int, session: Session | None = None
    ) -> tuple[list[SequenceRange], dict[int, bytes], list[int], int]:
        """(runs to fetch, leaves the peer listed for them, forks, round trips: fingerprint
        rounds and listing rounds; fetching envelopes and their proofs adds two more, each
        requests in parallel). Named ranges (`session.named`) are not listed: the ids this
        node lacks there are fetched at once, and `repair` checks the ranges afterwards."""
        if session is None:
            session = await self._session(originator)
        trips = session.round_trips
        wanted: list[SequenceRange] = []
        listed_leaves: dict[int, bytes] = {}
        forks: list[int] = []
        listings = 0
        listed: list[SequenceRange] = session.listed
        session.listed = []
        while not session.done or listed:
            if not session.done:
                mine, theirs = await self._fingerprints(peer, originator, session.asking)
                fetch = session.answer(mine, theirs)
                wanted += fetch.whole
                listed += fetch.listed
                if fetch.named:
                    wanted += runs(await self._logs.absent(originator, sorted(fetch.named)))
            if listed:
                listings += 1
                missing, found_forks = await self._listed(peer, originator, listed)
                listed_leaves.update(missing)
                forks += found_forks
                wanted += runs(missing)
                listed = []
        return sorted(wanted), listed_leaves, forks, session.round_trips - trips + listings

    async def _uncovered(
        self, withholding: WithholdingCheck, originator: int, checkpoint: Checkpoint
    ) -> list[int]:
        """Sequence ids the checkpoint accepted here covers and this node holds no leaf of,
        not yet settled: those left unanswered before, then a window of the log that moves
        on once it has no more to ask than one check takes (and starts over at the end)."""
        size = checkpoint.tree_size
        start = self._gaps_from.get(originator, 1)
        start = 1 if start > size else start
        end = min(size, start + GAP_WINDOW - 1)
        absent = await self._logs.absent(originator, [SequenceRange(start, end)])
        wanted = withholding.pending(originator)
        fresh = [s for s in withholding.unsettled(originator, absent) if s not in wanted]
        wanted += fresh[: max(MAX_CHECKED - len(wanted), 0)]
        if len(fresh) <= MAX_CHECKED:
            self._gaps_from[originator] = end + 1
        return wanted[:MAX_CHECKED]

    async def _session(self, originator: int) -> Session:
        return Session(
            await self._logs.tree_size(originator),
            held=await self._logs.highest_leaf(originator),
            name_max=NAME_MAX,
        )

    async def restore_lost(self, peer: RepairPeer, originator: int, outcome: Outcome) -> None:
        """Fetches the next losses of the originator's log here from the peer, each checked
        against the leaf held here (and the checkpoint held here, as any repair)."""
        lost = await self.losses.next(originator)
        if not lost:
            return
        part = Outcome()
        target = self._originator_log(originator)
        checkpoint = await self._logs.latest_checkpoint(originator)
        got = await self._fetched(peer, originator, target, checkpoint, runs(lost), lost, part)
        outcome.lost += len(lost)
        outcome.restored += len(got)
        unserved = [s for s in lost if s not in got]
        if self._withholding is not None and unserved:
            # A loss the originator itself does not serve back (found by the scrub or
            # the loss windows): it is asked to account for it, as for a gap repair finds.
            await self._withholding.check(peer, originator, checkpoint, unserved, lost)
        outcome.rejected += part.rejected
        outcome.unproven += part.unproven
        outcome.store_s += part.store_s
        log.info(
            "lost_envelopes_repair",
            originator=originator,
            peer=peer.node_id,
            lost=len(lost),
            restored=len(got),
            first=min(lost),
        )

    async def repair(self, peer: RepairPeer, originator: int, losses_only: bool = False) -> Outcome:
        """`losses_only`: only this node's losses (its own log, which no peer holds more of
        than it signed, replication.recovery)."""
        if losses_only:
            outcome = Outcome()
            await self.restore_lost(peer, originator, outcome)
            self._count(originator, outcome)
            return outcome
        session = await self._session(originator)
        wanted, leaves, forks, trips = await self.reconcile(peer, originator, session)
        outcome = Outcome(round_trips=trips, wanted=sum(r.span for r in wanted))
        target = self._originator_log(originator)
        checkpoint = await self._logs.latest_checkpoint(originator)
        got = await self._fetched(peer, originator, target, checkpoint, wanted, leaves, outcome)
        # A named range was fetched without listing its leaves: it settles if what
        # arrived (verified, proven) makes the two fingerprints meet. One that does not
        # (a fork, a leaf the peer no longer serves, one refused) is listed or descends
        # now, with naming off; ids asked for already are not asked again.
        if session.named:
            asked = {s for r in wanted for s in range(r.first, r.last + 1)}
            session.settle(got)
            more, more_leaves, more_forks, more_trips = await self.reconcile(
                peer, originator, session
            )
            outcome.round_trips += more_trips
            forks += more_forks
            again = [s for r in more for s in range(r.first, r.last + 1) if s not in asked]
            if again:
                outcome.wanted += len(again)
                got |= await self._fetched(
                    peer, originator, target, checkpoint, runs(again), more_leaves, outcome
                )
                wanted += runs(again)
                leaves |= more_leaves
        outcome.expired = outcome.wanted - outcome.stored - outcome.rejected - outcome.unproven
        if self._withholding is not None and peer.node_id == originator and checkpoint:
            # From what this node holds, not from what the originator chose to show: every
            # id its accepted checkpoint covers that is not here is put to it.
            uncovered = await self._uncovered(self._withholding, originator, checkpoint)
            await self._withholding.check(peer, originator, checkpoint, uncovered, leaves)
        await self.restore_lost(peer, originator, outcome)
        REPAIR_ROUND_TRIPS.labels(str(peer.node_id)).inc(outcome.round_trips)
        if forks:
            await self._forks(peer, originator, target, forks, outcome)
        self._count(originator, outcome)
        return outcome

    async def _fetched(
        self,
        peer: RepairPeer,
        originator: int,
        target: OriginatorLog,
        checkpoint: Checkpoint | None,
        wanted: list[SequenceRange],
        leaves: dict[int, bytes],
        outcome: Outcome,
    ) -> dict[int, bytes]:
        """The runs `wanted` fetched, checked and stored; returns the leaves stored."""
        bulk = sum(r.span for r in wanted) >= BULK_MIN
        groups = _groups(wanted)
        proofs = _Proofs(peer, originator, checkpoint, [r for g in groups for r in g])
        limit = asyncio.Semaphore(FETCH_CONCURRENCY)
        got: dict[int, bytes] = {}

        async def fetch(run: SequenceRange) -> tuple[SequenceRange, list[bytes]]:
            async with limit:
                return run, await peer.envelopes(originator, run)

        async def one(group: list[SequenceRange]) -> list[IndexedEnvelope]:
            fetched = await all_or_cancel(*(fetch(r) for r in group))
            valid = await self._verified(target, fetched, leaves, outcome, bulk)
            return await self._proven(peer, originator, valid, proofs, outcome)

        # Groups are fetched, verified and proven concurrently, up to GROUPS_AHEAD of the one
        # being stored (a large repair does not hold the whole gap in memory); they are
        # stored in order as they come, so inserting overlaps the checks of the next ones.
        upcoming = iter(groups)
        checking: deque[asyncio.Future[list[IndexedEnvelope]]] = deque()

        def refill() -> None:
            while len(checking) < GROUPS_AHEAD and (group := next(upcoming, None)) is not None:
                checking.append(asyncio.ensure_future(one(group)))

        try:
            kept: list[IndexedEnvelope] = []
            refill()
            while checking:
                kept += await checking.popleft()
                refill()
                # Stored when a batch is full, and whenever the next group is not checked
                # yet (waiting for it would leave the insert's share of the work for later).
                if len(kept) >= STORE_BATCH or not (checking and checking[0].done()):
                    await self._store(target, kept, peer, outcome, got)
                    kept = []
            await self._store(target, kept, peer, outcome, got)
        finally:
            for part in checking:
                part.cancel()
            await asyncio.gather(*checking, return_exceptions=True)
            await proofs.close()
        return got

    @staticmethod
    async def _store(
        target: OriginatorLog,
        kept: list[IndexedEnvelope],
        peer: RepairPeer,
        outcome: Outcome,
        got: dict[int, bytes],
    ) -> None:
        """Stores `kept`, adding their leaves to `got`."""
        if not kept:
            return
        started = time.perf_counter()
        batch: list[Verdict] = list(kept)
        await target.store(batch, peer.node_id, direct=False)
        outcome.store_s += time.perf_counter() - started
        outcome.stored += len(kept)
        got.update((e.sequence_id, e.leaf or b"") for e in kept)

    async def _verified(
        self,
        target: OriginatorLog,
        fetched: Sequence[tuple[SequenceRange, list[bytes]]],
        leaves: dict[int, bytes],
        outcome: Outcome,
        bulk: bool,
    ) -> list[IndexedEnvelope]:
        """Envelopes of the runs asked for, signed by the originator, whose leaf is the one
        the peer listed: each run's fetched envelopes, verified as one batch."""
        raws = [raw for _, found in fetched for raw in found]
        asked = [run for run, found in fetched for _ in found]
        verdicts = [v for part in target.start_verify(raws, bulk) for v in await part]
        valid: list[IndexedEnvelope] = []
        for run, v in zip(asked, verdicts, strict=True):
            if not isinstance(v, IndexedEnvelope):
                outcome.rejected += 1
                log.warning("repair_rejected", originator=target.originator, reason=v.detail)
            elif run.first <= v.sequence_id <= run.last:
                if leaves.get(v.sequence_id, v.leaf) != v.leaf:
                    outcome.rejected += 1  # not what the peer fingerprinted
                else:
                    valid.append(v)
        return valid

    async def _proven(
        self,
        peer: RepairPeer,
        originator: int,
        valid: list[IndexedEnvelope],
        proofs: _Proofs,
        outcome: Outcome,
    ) -> list[IndexedEnvelope]:
        """Those of `valid` the stored checkpoint does not cover, and the covered runs that
        prove against its root."""
        checkpoint = proofs.checkpoint
        if checkpoint is None:
            return valid
        size = checkpoint.tree_size
        kept = [e for e in valid if e.sequence_id > size]
        covered = {e.sequence_id: e for e in valid if e.sequence_id <= size}
        covered_runs = runs(covered)
        if not covered_runs:
            return kept
        try:
            paths = await proofs.of(covered_runs)
        except Exception as exc:  # the peer's tree does not reach that far: another will
            outcome.unproven += len(covered)
            log.info("repair_unproven", originator=originator, peer=peer.node_id, error=repr(exc))
            return kept
        for run, (first, last) in zip(covered_runs, paths, strict=True):
            members = [covered[s] for s in range(run.first, run.last + 1)]
            leaves = [e.leaf or b"" for e in members]
            try:
                root = merkle.run_root(run.first - 1, leaves, size, first, last)
            except merkle.ProofError:
                root = b""
            if root != checkpoint.root:
                outcome.rejected += len(members)
                log.warning(
                    "repair_rejected",
                    originator=originator,
                    peer=peer.node_id,
                    reason=f"{run.first}..{run.last} not in the checkpoint at {size}",
                )
                continue
            kept += members
        return kept

    async def _forks(
        self,
        peer: RepairPeer,
        originator: int,
        target: OriginatorLog,
        forks: list[int],
        outcome: Outcome,
    ) -> None:
        mine = await self._stored.stored_envelopes(originator, forks)
        for run in runs(forks):
            raws = await peer.envelopes(originator, run)
            for part in target.start_verify(raws):
                for v in await part:
                    have = mine.get(v.sequence_id) if isinstance(v, IndexedEnvelope) else None
                    if isinstance(v, IndexedEnvelope) and have is not None and have != v.raw:
                        outcome.forks.append(v.sequence_id)
                        log.error(
                            "fork_found",
                            originator=originator,
                            sequence_id=v.sequence_id,
                            peer=peer.node_id,
                            stored="0x" + have.hex(),
                            other="0x" + v.raw.hex(),
                        )
                        await self._on_fork(originator, have, v.raw)

    @staticmethod
    def _count(originator: int, outcome: Outcome) -> None:
        label = str(originator)
        for name in ("stored", "expired", "lost", "restored", "rejected", "unproven"):
            if value := getattr(outcome, name):
                REPAIR_ENVELOPES.labels(label, name).inc(value)
        if outcome.forks:
            REPAIR_ENVELOPES.labels(label, "fork").inc(len(outcome.forks))


class _Proofs:
    """The run proofs of one repair against the checkpoint stored here: those of the parts
    as planned are asked for in one request at once, while their envelopes are fetched; a
    part whose envelopes came back as other runs (some expired, some refused) asks for its
    own."""

    def __init__(
        self,
        peer: RepairPeer,
        originator: int,
        checkpoint: Checkpoint | None,
        parts: Sequence[SequenceRange],
    ) -> None:
        self.checkpoint = checkpoint
        self._peer = peer
        self._originator = originator
        self._size = size = checkpoint.tree_size if checkpoint is not None else 0
        planned = [SequenceRange(p.first, min(p.last, size)) for p in parts if p.first <= size]
        self._planned = {r: i for i, r in enumerate(planned)}
        self._asked = asyncio.ensure_future(self._ask(planned)) if planned else None

    async def _ask(self, runs: Sequence[SequenceRange]) -> list[tuple[list[bytes], list[bytes]]]:
        found = await self._peer.run_proofs(self._originator, runs, self._size)
        if len(found) != len(runs):
            raise merkle.ProofError(f"{len(found)} run proofs for {len(runs)} runs")
        return found

    async def of(self, runs: Sequence[SequenceRange]) -> list[tuple[list[bytes], list[bytes]]]:
        if self._asked is not None and all(r in self._planned for r in runs):
            planned = await asyncio.shield(self._asked)
            return [planned[self._planned[r]] for r in runs]
        return await self._ask(runs)

    async def close(self) -> None:
        if self._asked is not None:
            self._asked.cancel()
            await asyncio.gather(self._asked, return_exceptions=True)


class Peer(RepairPeer, ForkPeer, Protocol):
    """A peer to repair from, and to take forks from."""


# () -> the peers to repair from now
Peers = Callable[[], Sequence[Peer]]
Originators = Callable[[], list[int]]


class AntiEntropy:
    """Every `interval_s`, repairs each originator's log (ids >= 100, not this node's) from
    each peer in turn, then takes the forks of it the peer keeps and this node does not
    (replication.fork_sync); one at a time, so repair never crowds out live replication.
    This node's own log (`own`) is repaired of its losses only; a lost store is told to
    `outage`."""

    def __init__(
        self,
        repair: Repair,
        originators: Originators,
        peers: Peers,
        interval_s: float,
        outage: DatabaseOutage,
        forks: ForkSync | None = None,
        own: int | None = None,
    ) -> None:
        self._repair = repair
        self._outage = outage
        self._forks = forks
        self._originators = originators
        self._peers = peers
        self._interval_s = interval_s
        self._own = own
        self._task: asyncio.Task[None] | None = None
        self.passes = 0

    async def run_once(self) -> list[Outcome]:
        outcomes = []
        for originator in self._originators():
            for peer in self._peers():
                outcomes.append(await self._one(peer, originator))
        if self._own is not None and has_log(self._own):
            for peer in self._peers():
                outcomes.append(await self._one(peer, self._own, losses_only=True))
        self.passes += 1
        return [o for o in outcomes if o is not None]

    async def _one(self, peer: Peer, originator: int, losses_only: bool = False) -> Outcome | None:
        end_if_cancelled()
        bound = log.bind(originator=originator, peer=peer.node_id)
        try:
            outcome = await self._repair.repair(peer, originator, losses_only)
        except asyncio.CancelledError:
            raise
        except StoreUnavailable as exc:  # this node's own store: the next pass tries again
            self._outage.failed("repair", exc, originator=originator, peer=peer.node_id)
            return None
        except Exception as exc:  # a peer down or without LogApi: the next pass tries again
            bound.info("repair_failed", error=repr(exc)[:300])
            return None
        if self._forks is not None and not losses_only:
            await self._sync_forks(peer, originator)
        if outcome.wanted or outcome.forks or outcome.lost:
            bound.info(
                "repair_done",
                round_trips=outcome.round_trips,
                wanted=outcome.wanted,
                stored=outcome.stored,
                expired=outcome.expired,
                lost=outcome.lost,
                restored=outcome.restored,
                rejected=outcome.rejected,
                unproven=outcome.unproven,
                forks=len(outcome.forks),
            )
        return outcome

    async def _sync_forks(self, peer: Peer, originator: int) -> None:
        assert self._forks is not None
        bound = log.bind(originator=originator, peer=peer.node_id)
        try:
            synced = await self._forks.sync(peer, originator)
        except asyncio.CancelledError:
            raise
        except StoreUnavailable as exc:  # the next pass tries again
            self._outage.failed("fork_sync", exc, originator=originator, peer=peer.node_id)
            return
        except Exception as exc:  # the next pass tries again
            bound.info("fork_sync_failed", error=repr(exc)[:300])
            return
        if synced.sent or synced.waiting:
            bound.info("fork_sync_done", sent=synced.sent, waiting=synced.waiting)

    async def _run(self) -> None:
        # The first pass comes soon after start, not a whole interval later: a node that
        # lost rows, or was restored from a backup, is whole again within a minute.
        await asyncio.sleep(min(self._interval_s, FIRST_PASS_S))
        while True:
            await self.run_once()
            end_if_cancelled()
            await asyncio.sleep(self._interval_s)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="anti-entropy")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
