"""Repair with fakes around the real checks: what is missing is fetched and stored; a run a
peer serves that the stored checkpoint does not commit to is refused; expired envelopes
are nothing to fetch and no fault; a fork goes to the hook with both envelopes. Bulk
verification in worker processes, and its fallback to threads when they die."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from concurrent.futures.process import BrokenProcessPool

import pytest

from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.client.node import group_message_envelope
from xnode.core import merkle
from xnode.core.checkpoints import Checkpoint, sign_checkpoint
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import IndexedEnvelope, build_payer_envelope, originate
from xnode.core.envelopes import validate_payer_envelope as valid_payer
from xnode.core.forks import ForkResolution
from xnode.core.reconciliation import Fingerprint, SequenceRange
from xnode.core.verification import InvalidEnvelope, Position, Verdict
from xnode.replication import anti_entropy
from xnode.replication.anti_entropy import Repair
from xnode.replication.ingest import IngestContext, OriginatorLog
from xnode.replication.verifiers import BulkVerifiers, Verifiers

KEY = SigningKey.generate()
PAYER = SigningKey.generate()
NODE = 100


def signed(seq: int, data: bytes = b"m") -> IndexedEnvelope:
    payer = build_payer_envelope(group_message_envelope(bytes(16), data), PAYER, NODE)
    return originate(valid_payer(payer, NODE), NODE, seq, 10**18 + seq, KEY)


class Side:
    """One node's log of originator 100: leaves, envelopes still held, a checkpoint."""

    def __init__(self, envelopes: dict[int, IndexedEnvelope], expired: Sequence[int] = ()):
        self.held_leaves = {s: e.leaf or b"" for s, e in envelopes.items()}
        self.held = {s: e.raw for s, e in envelopes.items() if s not in expired}
        self.expired = set(expired)
        self.checkpoint: Checkpoint | None = None
        self.node_id = 200
        self.bytes_exchanged = 0

    def _in(self, ranges: Sequence[SequenceRange]) -> list[tuple[int, bytes]]:
        return sorted(
            (s, h)
            for s, h in self.held_leaves.items()
            if any(r.first <= s <= r.last for r in ranges)
        )

    async def fingerprints(
        self, originator: int, ranges: Sequence[SequenceRange]
    ) -> list[Fingerprint]:
        return [Fingerprint.of(h for _, h in self._in([r])) for r in ranges]

    async def leaves(
        self, originator: int, ranges: Sequence[SequenceRange]
    ) -> list[tuple[int, bytes]]:
        return self._in(ranges)

    async def absent(self, originator: int, ranges: Sequence[SequenceRange]) -> list[int]:
        return [s for r in ranges for s in range(r.first, r.last + 1) if s not in self.held_leaves]

    async def lost(
        self, originator: int, ranges: Sequence[SequenceRange], now_unix: int, limit: int
    ) -> list[tuple[int, bytes]]:
        """Leaves without their envelope that are not expired."""
        return [
            (s, self.held_leaves[s])
            for r in ranges
            for s in range(r.first, r.last + 1)
            if s in self.held_leaves and s not in self.held and s not in self.expired
        ][:limit]

    async def tree_size(self, originator: int) -> int:
        size = 0
        while size + 1 in self.held_leaves:
            size += 1
        return size

    async def highest_leaf(self, originator: int) -> int:
        return max(self.held_leaves, default=0)

    async def latest_checkpoint(self, originator: int) -> Checkpoint | None:
        return self.checkpoint

    async def run_proofs(
        self, originator: int, runs: Sequence[SequenceRange], tree_size: int
    ) -> list[tuple[list[bytes], list[bytes]]]:
        leaves = [self.held_leaves[s] for s in range(1, tree_size + 1)]
        nodes: dict[tuple[int, int], bytes] = {}
        frontier = merkle.Frontier()
        for leaf in leaves:
            nodes.update(((lv, i), h) for lv, i, h in frontier.append(leaf))
        nodes.update(((0, i), h) for i, h in enumerate(leaves))

        def path(sequence_id: int) -> list[bytes]:
            return merkle.inclusion_proof(sequence_id - 1, tree_size, lambda lv, i: nodes[(lv, i)])

        return [(path(r.first), path(r.last)) for r in runs]

    async def envelopes(self, originator: int, run: SequenceRange) -> list[bytes]:
        return [raw for s, raw in sorted(self.held.items()) if run.first <= s <= run.last]


class Store:
    def __init__(self, side: Side, envelopes: dict[int, IndexedEnvelope]) -> None:
        self.side = side
        self.rows = {s: e.raw for s, e in envelopes.items()}

    async def newest_per_originator(self) -> dict[int, Position]:
        return {}

    async def stored_envelopes(
        self, originator: int, sequence_ids: Sequence[int]
    ) -> dict[int, bytes]:
        return {s: self.rows[s] for s in sequence_ids if s in self.rows}

    async def insert_received(
        self, envelopes: Sequence[IndexedEnvelope], notice_token: str
    ) -> list[tuple[int, int]]:
        new = [e for e in envelopes if e.sequence_id not in self.rows]
        for e in new:
            self.rows[e.sequence_id] = e.raw
            self.side.held_leaves[e.sequence_id] = e.leaf or b""
            self.side.held[e.sequence_id] = e.raw
        return [(NODE, e.sequence_id) for e in new]

    async def resolve_forks(
        self, envelopes: Sequence[IndexedEnvelope]
    ) -> list[ForkResolution | None]:
        raise AssertionError("no forks in these tests")


class Reports:
    def __init__(self) -> None:
        self.filed: list[str] = []

    async def record(self, unsigned: mb.UnsignedMisbehaviorReport, detail: str) -> None:
        self.filed.append(detail)


async def _nothing(stored: object) -> None:
    return None


def checkpoint_of(envelopes: dict[int, IndexedEnvelope]) -> Checkpoint:
    leaves = [envelopes[s].leaf or b"" for s in sorted(envelopes)]
    return sign_checkpoint(KEY, NODE, len(leaves), merkle.root_of(leaves), 1, None)


def repair_here(
    here: dict[int, IndexedEnvelope],
) -> tuple[Repair, Side, Store, Reports, list[tuple[bytes, bytes]]]:
    side = Side(here)
    store = Store(side, here)
    reports = Reports()
    ctx = IngestContext(store, reports, _nothing, "t", lambda: {NODE: KEY.public_key}, Verifiers(1))
    target = OriginatorLog(NODE, None, ctx)
    forks: list[tuple[bytes, bytes]] = []

    async def on_fork(originator: int, stored: bytes, other: bytes) -> None:
        forks.append((stored, other))

    return Repair(side, store, lambda _: target, on_fork), side, store, reports, forks


LOG = {s: signed(s) for s in range(1, 301)}


async def test_a_gap_is_filled_and_proven_against_the_checkpoint() -> None:
    here = {s: e for s, e in LOG.items() if not 100 <= s <= 180}
    repair, side, store, reports, _ = repair_here(here)
    side.checkpoint = checkpoint_of(LOG)
    outcome = await repair.repair(Side(LOG), NODE)
    assert outcome.stored == 81 and outcome.rejected == outcome.unproven == 0
    assert store.rows == {s: e.raw for s, e in LOG.items()}
    assert not reports.filed
    again = await repair.repair(Side(LOG), NODE)
    assert (again.round_trips, again.wanted) == (1, 0)


async def test_a_run_the_checkpoint_does_not_commit_to_is_refused() -> None:
    # The originator signed other content for 150..160 (a fork it hid from the checkpoint):
    # a peer serving that run, consistently with its own leaves, fails the run's proof.
    other = {**LOG, **{s: signed(s, b"other") for s in range(150, 161)}}
    here = {s: e for s, e in LOG.items() if not 140 <= s <= 170}
    repair, side, store, _, _ = repair_here(here)
    side.checkpoint = checkpoint_of(LOG)
    outcome = await repair.repair(Side(other), NODE)
    assert outcome.stored == 0 and outcome.rejected == 31
    assert all(s not in store.rows for s in range(140, 171))


async def test_expired_envelopes_are_nothing_to_fetch_and_no_fault() -> None:
    here = {s: e for s, e in LOG.items() if s > 50}
    repair, side, _, reports, forks = repair_here(here)
    side.checkpoint = checkpoint_of(LOG)
    outcome = await repair.repair(Side(LOG, expired=range(1, 51)), NODE)
    assert (outcome.stored, outcome.expired, outcome.rejected) == (0, 50, 0)
    assert not reports.filed and not forks


def losing(ids: range) -> tuple[Repair, Store]:
    """A node holding the whole log's leaves whose envelopes `ids` are lost (not expired)."""
    repair, side, store, _, _ = repair_here(dict(LOG))
    for s in ids:
        del side.held[s], store.rows[s]
    side.checkpoint = checkpoint_of(LOG)
    return repair, store


async def test_lost_envelopes_are_fetched_back_by_name_checked_against_the_leaves_held() -> None:
    repair, store = losing(range(60, 161))
    outcome = await repair.repair(Side(LOG), NODE)
    assert (outcome.lost, outcome.restored, outcome.rejected) == (101, 101, 0)
    assert outcome.wanted == 0  # the fingerprints agree: only the losses were asked for
    assert all(store.rows[s] == LOG[s].raw for s in range(60, 161))
    repair, store = losing(range(60, 161))
    other = {**LOG, **{s: signed(s, b"other") for s in range(60, 161)}}
    outcome = await repair.repair(Side(other), NODE)  # validly signed, not the leaves held
    assert (outcome.restored, outcome.rejected) == (0, 101)
    assert all(s not in store.rows for s in range(60, 161))


async def test_a_loss_no_peer_serves_stays_a_loss_and_is_asked_again() -> None:
    repair, _ = losing(range(10, 21))
    first = await repair.repair(Side(LOG, expired=range(10, 21)), NODE)
    assert (first.lost, first.restored) == (11, 0)
    again = await repair.repair(Side(LOG), NODE, losses_only=True)
    assert (again.lost, again.restored) == (11, 11)


async def test_a_fork_goes_to_the_hook_with_both_envelopes() -> None:
    repair, _, _, _, forks = repair_here(dict(LOG))
    theirs = {**LOG, 42: signed(42, b"other")}
    outcome = await repair.repair(Side(theirs), NODE)
    assert outcome.forks == [42]
    assert forks == [(LOG[42].raw, theirs[42].raw)]


async def test_a_fork_beside_a_gap_this_node_names_is_still_found() -> None:
    """The gap alone would settle by naming the ids lacked here (NAME_MAX) and fetching them
    without a listing; the fork in the same range keeps the fingerprints apart after the
    fetch, so the range descends and the fork is found (the gap is not fetched twice)."""
    here = {s: e for s, e in LOG.items() if not 101 <= s <= 105}
    repair, _, store, _, forks = repair_here(here)
    theirs = {**LOG, 110: signed(110, b"other")}  # asked in one part with 101..105
    outcome = await repair.repair(Side(theirs), NODE)
    assert outcome.stored == 5 and outcome.forks == [110] and outcome.wanted == 5
    assert forks == [(LOG[110].raw, theirs[110].raw)]
    assert all(store.rows[s] == LOG[s].raw for s in range(101, 106))


async def test_a_gap_this_node_names_is_fetched_without_a_listing() -> None:
    here = {s: e for s, e in LOG.items() if not 101 <= s <= 105}
    repair, _, store, _, _ = repair_here(here)
    outcome = await repair.repair(Side(LOG), NODE)
    assert (outcome.stored, outcome.round_trips) == (5, 1)  # the fingerprints' round only
    assert store.rows == {s: e.raw for s, e in LOG.items()}


async def test_an_expired_envelope_in_a_range_fetched_without_listing_is_found() -> None:
    """103 is fingerprinted by the peer and no longer served: what arrived does not make the
    fingerprints meet, so the range is listed after all; 103 is not asked for again."""
    here = {s: e for s, e in LOG.items() if not 101 <= s <= 105}
    repair, side, store, reports, forks = repair_here(here)
    side.checkpoint = checkpoint_of(LOG)
    outcome = await repair.repair(Side(LOG, expired=[103]), NODE)
    assert (outcome.stored, outcome.expired, outcome.rejected, outcome.wanted) == (4, 1, 0, 5)
    assert outcome.round_trips > 1
    assert sorted(store.rows) == [s for s in LOG if s != 103]
    assert not reports.filed and not forks


async def test_runs_broken_by_expired_envelopes_are_proven_as_the_runs_that_came() -> None:
    here = {s: e for s, e in LOG.items() if not 100 <= s <= 180}
    repair, side, store, reports, _ = repair_here(here)
    side.checkpoint = checkpoint_of(LOG)
    outcome = await repair.repair(Side(LOG, expired=range(120, 130)), NODE)
    assert (outcome.stored, outcome.expired, outcome.rejected, outcome.unproven) == (71, 10, 0, 0)
    assert sorted(store.rows) == [s for s in LOG if not 120 <= s <= 129]
    assert not reports.filed


async def test_bulk_verification_runs_in_processes_and_falls_back_to_threads() -> None:
    pool = BulkVerifiers(1)
    verifiers = Verifiers(1, processes=1)
    verifiers.bulk = pool
    try:
        ctx = IngestContext(
            Store(Side({}), {}),
            Reports(),
            _nothing,
            "t",
            lambda: {NODE: KEY.public_key},
            verifiers,
        )
        target = OriginatorLog(NODE, None, ctx)
        raws = [LOG[s].raw for s in range(1, 101)] + [signed(101).raw[:-1]]

        async def verdicts() -> list[Verdict]:
            return [v for part in target.start_verify(raws, bulk=True) for v in await part]

        first = await verdicts()
        assert [v.leaf for v in first[:100] if isinstance(v, IndexedEnvelope)] == [
            LOG[s].leaf for s in range(1, 101)
        ]
        assert isinstance(first[100], InvalidEnvelope)
        with pytest.raises(BrokenProcessPool):  # its only worker dies
            await asyncio.wrap_future(pool.submit(os._exit, 1))
        assert await verdicts() == first  # in the threads
        assert verifiers.bulk is None
    finally:
        pool.shutdown()


async def test_a_gap_in_many_groups_is_stored_in_order_a_window_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(anti_entropy, "FETCH_SPAN", 10)
    monkeypatch.setattr(anti_entropy, "GROUPS_AHEAD", 2)
    monkeypatch.setattr(anti_entropy, "STORE_BATCH", 10)
    here = {s: e for s, e in LOG.items() if not 100 <= s <= 180}
    repair, side, store, _, _ = repair_here(here)
    side.checkpoint = checkpoint_of(LOG)
    inserted: list[list[int]] = []
    insert = store.insert_received

    async def recording(
        envelopes: Sequence[IndexedEnvelope], notice_token: str
    ) -> list[tuple[int, int]]:
        inserted.append([e.sequence_id for e in envelopes])
        return await insert(envelopes, notice_token)

    monkeypatch.setattr(store, "insert_received", recording)
    peer = Side(LOG)
    in_flight, most = 0, 0
    fetch = peer.envelopes

    async def counting(originator: int, run: SequenceRange) -> list[bytes]:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(0)
        in_flight -= 1
        return await fetch(originator, run)

    monkeypatch.setattr(peer, "envelopes", counting)
    outcome = await repair.repair(peer, NODE)
    assert outcome.stored == 81 and outcome.rejected == outcome.unproven == 0
    assert [s for batch in inserted for s in batch] == list(range(100, 181))
    # 9 groups of 9 (one run each), stored two at a time; 2 groups (2 fetches) in flight
    # groups of 2, 5, 10 x 6, 6, 2 x 4 (anti_entropy._groups), stored as they come, whole
    # batches at most; 2 groups (2 fetches) in flight at most (fewer when a loaded machine
    # verifies one group before the next fetch starts)
    assert all(len(batch) <= 10 for batch in inserted) and 1 <= most <= 2


def test_groups_start_and_end_small(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(anti_entropy, "FETCH_SPAN", 10)
    groups = anti_entropy._groups([SequenceRange(100, 140), SequenceRange(151, 190)])
    spans = [sum(r.span for r in g) for g in groups]
    # the workers start on a small group; little is left to check once the rest is done
    assert spans == [2, 5, 10, 10, 10, 10, 10, 10, 6, 2, 2, 2, 2]
    # runs cut at the groups' ends, nothing lost, nothing twice
    ids = [s for g in groups for r in g for s in range(r.first, r.last + 1)]
    assert ids == [*range(100, 141), *range(151, 191)]
    assert anti_entropy._groups([SequenceRange(7, 7)]) == [[SequenceRange(7, 7)]]
