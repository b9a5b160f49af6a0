"""Committed logs: issuing this node's checkpoints, answering proofs and
fingerprints over any originator's log, and taking in peers' checkpoints.

The store behind `LogPort` keeps leaves per sequence id and builds each tree over the
contiguous prefix of leaves it holds; everything here works on those trees."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import structlog

from xnode.core import merkle
from xnode.core.checkpoints import (
    Checkpoint,
    CheckpointError,
    TopicCommitment,
    check_consistent,
    check_follows,
    forked_version_covered,
    sign_checkpoint,
    verify_checkpoint,
)
from xnode.core.crypto import SigningKey
from xnode.core.errors import Reason, Rejected
from xnode.core.reconciliation import Fingerprint, SequenceRange
from xnode.observability.outage import DatabaseOutage
from xnode.usecases.ports import StoreUnavailable

log = structlog.get_logger(__name__)

MAX_CHECKPOINTS = 1000  # per GetCheckpoints answer
MAX_RANGES = 1024  # per GetFingerprints / GetLeaves / GetRunProofs request
MAX_LEAVES = 10_000  # per GetLeaves answer

# (tree size, root, previous checkpoint, topic commitment) -> the signed next checkpoint
IssueSigner = Callable[[int, bytes, Checkpoint | None, TopicCommitment | None], Checkpoint]


class LogPort(Protocol):
    """The committed logs the store holds (implemented by xnode.store.logs.LogStore)."""

    async def tree_size(self, originator: int) -> int: ...

    async def highest_leaf(self, originator: int) -> int:
        """The highest sequence id whose leaf is held (0 for none), past gaps too."""
        ...

    async def perfect(
        self, originator: int, nodes: Sequence[merkle.Node]
    ) -> dict[merkle.Node, bytes]: ...

    async def fingerprints(
        self, originator: int, ranges: Sequence[SequenceRange]
    ) -> list[Fingerprint]: ...

    async def leaves(
        self, originator: int, ranges: Sequence[SequenceRange]
    ) -> list[tuple[int, bytes]]: ...

    async def absent(self, originator: int, ranges: Sequence[SequenceRange]) -> list[int]:
        """The sequence ids in `ranges` whose leaf is not held, in order."""
        ...

    async def lost(
        self, originator: int, ranges: Sequence[SequenceRange], now_unix: int, limit: int
    ) -> list[tuple[int, bytes]]:
        """(sequence id, leaf) of leaves held without their envelope, not provably expired."""
        ...

    async def checkpoints(self, originator: int, after: int, limit: int) -> list[Checkpoint]: ...

    async def latest_checkpoint(self, originator: int) -> Checkpoint | None: ...

    async def checkpoint_at(self, originator: int, tree_size: int) -> Checkpoint | None: ...

    async def add_checkpoint(self, checkpoint: Checkpoint, conflict: str | None = None) -> bool: ...

    async def issue(self, originator: int, sign: IssueSigner) -> Checkpoint | None: ...

    async def checkpoints_between(
        self, originator: int, first_size: int, last_size: int
    ) -> list[StoredCheckpoint]: ...

    async def accepted_below(self, originator: int, tree_size: int) -> Checkpoint | None: ...

    async def set_conflicts(self, changes: Sequence[tuple[int, str | None]]) -> None: ...

    async def fork_leaves(self, originator: int, last: int) -> dict[int, list[bytes]]: ...

    async def advance_topics(self, originator: int, size: int) -> TopicCommitment | None:
        """The originator's topic map brought up to `size` from the envelopes held (None
        when one of them is not held)."""
        ...


@dataclass(frozen=True)
class StoredCheckpoint:
    """A checkpoint as stored: accepted (conflict None) or kept aside as evidence."""

    id: int
    checkpoint: Checkpoint
    conflict: str | None


class NotHeld(LookupError):
    """What was asked for is beyond the tree this node holds (NOT_FOUND / OUT_OF_RANGE)."""


@dataclass(frozen=True)
class InclusionProof:
    leaf: bytes
    tree_size: int
    proof: list[bytes]
    checkpoint: Checkpoint | None


@dataclass(frozen=True)
class RunProof:
    """The inclusion proofs of a run's first and last leaf (merkle.run_root)."""

    first: list[bytes]
    last: list[bytes]


def _lookup(hashes: dict[merkle.Node, bytes]) -> merkle.PerfectHashes:
    return lambda level, index: hashes[(level, index)]


def _check_ranges(ranges: Sequence[SequenceRange]) -> None:
    if len(ranges) > MAX_RANGES:
        raise ValueError(f"{len(ranges)} ranges, the limit is {MAX_RANGES}")


def _check_disjoint(ranges: Sequence[SequenceRange]) -> None:
    """A fingerprint request reads each tile of the log at most once: its ranges may not
    overlap (1,024 copies of 1..2^63 read the whole log 1,024 times). Reconciliation asks
    for disjoint parts of the log, so it never meets this."""
    ordered = sorted(ranges, key=lambda r: r.first)
    for before, after in itertools.pairwise(ordered):
        if after.first <= before.last:
            raise ValueError(
                f"ranges {before.first}..{before.last} and {after.first}..{after.last} overlap; "
                "ask for each sequence id at most once per request"
            )


class LogQueries:
    """What LogApi answers, over the port."""

    def __init__(self, port: LogPort, poll_s: float, keepalive_s: float) -> None:
        self._port = port
        self._poll_s = poll_s
        self._keepalive_s = keepalive_s
        self._draining = asyncio.Event()

    def close_all(self) -> None:
        """Ends every follow at once and refuses new ones with UNAVAILABLE (the node is
        draining: an open follow would hold the server's stop for the whole grace, then end
        CANCELLED)."""
        self._draining.set()

    async def checkpoints(
        self, originator: int, after: int, latest: bool, limit: int
    ) -> list[Checkpoint]:
        if latest:
            found = await self._port.latest_checkpoint(originator)
            return [found] if found is not None else []
        limit = min(limit or MAX_CHECKPOINTS, MAX_CHECKPOINTS)
        return await self._port.checkpoints(originator, after, limit)

    async def follow(self, originator: int, after: int) -> AsyncIterator[list[Checkpoint]]:
        """New checkpoints as they are stored (polled); an empty list when idle for the
        keepalive interval; Rejected(UNAVAILABLE) once the node drains."""
        idle_since = time.monotonic()
        while True:
            if self._draining.is_set():
                raise Rejected(
                    Reason.UNAVAILABLE, "node is shutting down; follow from your last checkpoint"
                )
            found = await self._port.checkpoints(originator, after, MAX_CHECKPOINTS)
            if found:
                after = found[-1].tree_size
                idle_since = time.monotonic()
                yield found
                continue
            if time.monotonic() - idle_since >= self._keepalive_s:
                idle_since = time.monotonic()
                yield []
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._draining.wait(), self._poll_s)

    async def _size(self, originator: int, tree_size: int) -> int:
        return (await self._sized(originator, tree_size))[0]

    async def _sized(self, originator: int, tree_size: int) -> tuple[int, Checkpoint | None]:
        """The tree size asked for (0: the latest checkpoint's, with that checkpoint)."""
        if tree_size == 0:
            latest = await self._port.latest_checkpoint(originator)
            if latest is None:
                raise NotHeld(f"no checkpoint of originator {originator}")
            return latest.tree_size, latest
        held = await self._port.tree_size(originator)
        if tree_size > held:
            raise NotHeld(f"the tree of originator {originator} held here has {held} leaves")
        return tree_size, None

    async def inclusion(self, originator: int, sequence_id: int, tree_size: int) -> InclusionProof:
        size, latest = await self._sized(originator, tree_size)
        if not 1 <= sequence_id <= size:
            raise ValueError(f"sequence id {sequence_id} is not in a tree of {size} leaves")
        index = sequence_id - 1
        nodes = [(0, index), *merkle.perfect_nodes_for_inclusion(index, size)]
        hashes = await self._port.perfect(originator, nodes)
        proof = merkle.inclusion_proof(index, size, _lookup(hashes))
        # Against the latest checkpoint: read once, not again by its size.
        checkpoint = latest or await self._port.checkpoint_at(originator, size)
        return InclusionProof(hashes[(0, index)], size, proof, checkpoint)

    async def run_proofs(
        self, originator: int, tree_size: int, runs: Sequence[SequenceRange]
    ) -> tuple[int, list[RunProof]]:
        """(tree size, the inclusion proofs of each run's first and last leaf): one read of
        every tree node they need."""
        _check_ranges(runs)
        size = await self._size(originator, tree_size)
        for r in runs:
            if r.last > size:
                raise ValueError(f"run {r.first}..{r.last} is not in a tree of {size} leaves")
        ends = {i: None for r in runs for i in (r.first - 1, r.last - 1)}
        nodes = {n: None for i in ends for n in merkle.perfect_nodes_for_inclusion(i, size)}
        lookup = _lookup(await self._port.perfect(originator, list(nodes)))
        paths = {i: merkle.inclusion_proof(i, size, lookup) for i in ends}
        return size, [RunProof(paths[r.first - 1], paths[r.last - 1]) for r in runs]

    async def consistency(self, originator: int, first: int, second: int) -> list[bytes]:
        if not 0 < first <= second:
            raise ValueError(f"no consistency proof from {first} to {second} leaves")
        await self._size(originator, second)
        nodes = merkle.perfect_nodes_for_consistency(first, second)
        hashes = await self._port.perfect(originator, nodes)
        return merkle.consistency_proof(first, second, _lookup(hashes))

    async def fingerprints(
        self, originator: int, ranges: Sequence[SequenceRange]
    ) -> list[Fingerprint]:
        _check_ranges(ranges)
        _check_disjoint(ranges)
        return await self._port.fingerprints(originator, ranges)

    async def leaves(
        self, originator: int, ranges: Sequence[SequenceRange]
    ) -> list[tuple[int, bytes]]:
        _check_ranges(ranges)
        if sum(r.span for r in ranges) > MAX_LEAVES:
            raise ValueError(f"ranges span more than {MAX_LEAVES} sequence ids")
        return await self._port.leaves(originator, ranges)


class CheckpointIssuer:
    """Signs this node's next checkpoint every `every_envelopes` envelopes or every
    `every_s` seconds, whichever comes first, when its log grew since the last one; a lost
    store is told to `outage`."""

    def __init__(
        self,
        port: LogPort,
        node_id: int,
        key: SigningKey,
        every_envelopes: int,
        every_s: float,
        outage: DatabaseOutage,
        now_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self._port = port
        self._outage = outage
        self._node_id = node_id
        self._key = key
        self._every_envelopes = every_envelopes
        self._every_s = every_s
        self._now_ns = now_ns
        self._pending = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.issued = 0

    def committed(self, count: int) -> None:
        """This node appended `count` envelopes to its log."""
        self._pending += count
        if self._pending >= self._every_envelopes:
            self._wake.set()

    def _sign(
        self, size: int, root: bytes, previous: Checkpoint | None, topics: TopicCommitment | None
    ) -> Checkpoint:
        ns = self._now_ns()
        if previous is not None:
            ns = max(ns, previous.originator_ns + 1)  # the chain's times grow strictly
        return sign_checkpoint(self._key, self._node_id, size, root, ns, previous, topics)

    async def issue(self) -> Checkpoint | None:
        self._pending = 0
        checkpoint = await self._port.issue(self._node_id, self._sign)
        if checkpoint is not None:
            self.issued += 1
            log.debug("checkpoint_issued", tree_size=checkpoint.tree_size)
        return checkpoint

    async def _run(self) -> None:
        while True:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancel that
            # comes as the wake-up does, and stop() would wait for this loop forever.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._every_s):
                    await self._wake.wait()
            self._wake.clear()
            try:
                await self.issue()
            except StoreUnavailable as exc:  # down for a while, maybe: try again later
                self._outage.failed("checkpoint_issuer", exc)
            except Exception as exc:
                log.warning("checkpoint_issue_failed", error=str(exc))

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="checkpoint-issuer")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


# (first size, second size) -> the peer's consistency proof between them
ConsistencyFetch = Callable[[int, int], Awaitable[list[bytes]]]


class CheckpointIntake:
    """Takes in checkpoints of another originator (from a peer): verifies each against the
    registry key, the previous-hash chain, the last stored checkpoint (consistency) and the
    leaves held here, then stores it; one that contradicts what is stored is kept aside.

    Forks make what the leaves say change: when the fork rule puts the
    other version of a sequence id in the log, the tree from there is rebuilt. So which
    checkpoints are accepted must not depend on whether a checkpoint came before or after
    the fork: `settle` re-judges the stored checkpoints from a forked sequence id up against
    the log as it is now (accepted: its root is the log's at its size and it chains to the
    accepted one below; the rest kept aside). A checkpoint whose root covers a version the
    rule dropped is kept aside as evidence of the fork, whichever order things came in.
    Checkpoints accepted before their leaves were all here are judged the same way once the
    leaves are (at the next checkpoint taken in)."""

    def __init__(self, port: LogPort) -> None:
        self._port = port
        self._locks: dict[int, asyncio.Lock] = {}
        # per originator, the smallest tree size accepted before its leaves were all here
        self._unchecked: dict[int, int] = {}

    def _lock(self, originator: int) -> asyncio.Lock:
        return self._locks.setdefault(originator, asyncio.Lock())

    async def after(self, originator: int) -> int:
        """Where to resume following: the newest accepted checkpoint's tree size."""
        latest = await self._port.latest_checkpoint(originator)
        return latest.tree_size if latest is not None else 0

    async def receive(
        self, signed: bytes, public_key: bytes, consistency: ConsistencyFetch, source: int
    ) -> Checkpoint | None:
        """The stored checkpoint, or None when it was rejected or kept aside."""
        try:
            checkpoint = verify_checkpoint(signed, public_key)
        except CheckpointError as exc:
            log.warning("checkpoint_rejected", peer=source, reason=str(exc))
            return None
        originator = checkpoint.originator_node_id
        async with self._lock(originator):
            taken = await self._receive(checkpoint, consistency, source)
            unchecked = self._unchecked.get(originator)
            if unchecked is not None and unchecked <= await self._port.tree_size(originator):
                del self._unchecked[originator]
                await self._settle(originator, unchecked)
        return taken

    async def _receive(
        self, checkpoint: Checkpoint, consistency: ConsistencyFetch, source: int
    ) -> Checkpoint | None:
        originator = checkpoint.originator_node_id
        previous = await self._port.latest_checkpoint(originator)
        if previous is not None and checkpoint.tree_size <= previous.tree_size:
            same = await self._port.checkpoint_at(originator, checkpoint.tree_size)
            if same is not None and same.signed == checkpoint.signed:
                return None  # already held
        problem = await self._contradiction(previous, checkpoint, consistency)
        if problem is not None:
            problem = await self._fork_covered(checkpoint) or problem
            await self._port.add_checkpoint(checkpoint, problem)
            log.error(
                "checkpoint_conflict",
                originator=originator,
                peer=source,
                reason=problem,
                checkpoint="0x" + checkpoint.signed.hex(),
                stored="0x" + previous.signed.hex() if previous is not None else None,
            )
            return None
        if not await self._port.add_checkpoint(checkpoint):
            return None
        if checkpoint.tree_size > await self._port.tree_size(originator):
            known = self._unchecked.get(originator, checkpoint.tree_size)
            self._unchecked[originator] = min(known, checkpoint.tree_size)
        else:
            await self._check_topics(checkpoint, source)
        return checkpoint

    async def _check_topics(self, checkpoint: Checkpoint, source: int) -> None:
        """Recomputes the originator's topic map up to the checkpoint from the envelopes
        held here and compares it with the one the checkpoint commits to: a map that does
        not match the log is logged (the originator's commitment is false)."""
        originator, size = checkpoint.originator_node_id, checkpoint.tree_size
        ours = await self._port.advance_topics(originator, size)
        theirs = checkpoint.topics
        if ours is None or theirs is None or theirs.first_sequence_id != ours.first_sequence_id:
            return  # not comparable: an envelope not held, no commitment, or other spans
        if ours.map_root != theirs.map_root:
            log.error(
                "topic_map_mismatch",
                originator=originator,
                peer=source,
                tree_size=size,
                ours="0x" + ours.map_root.hex(),
                checkpoint="0x" + checkpoint.signed.hex(),
            )

    async def _contradiction(
        self, previous: Checkpoint | None, checkpoint: Checkpoint, consistency: ConsistencyFetch
    ) -> str | None:
        try:
            check_follows(previous, checkpoint)
            if previous is not None:
                proof = await consistency(previous.tree_size, checkpoint.tree_size)
                check_consistent(previous, checkpoint, proof)
        except (CheckpointError, merkle.ProofError) as exc:
            return str(exc)
        return await self._against_leaves(checkpoint)

    async def _root(self, originator: int, size: int) -> bytes:
        hashes = await self._port.perfect(originator, merkle.perfect_nodes_for_root(size))
        return merkle.range_hash(0, size, _lookup(hashes))

    async def _against_leaves(self, checkpoint: Checkpoint) -> str | None:
        originator, size = checkpoint.originator_node_id, checkpoint.tree_size
        if await self._port.tree_size(originator) < size:
            return None  # the leaves are not all here yet
        if await self._root(originator, size) != checkpoint.root:
            return _root_differs(size)
        return None

    async def _fork_covered(self, checkpoint: Checkpoint) -> str | None:
        """Why `checkpoint` is evidence of a known fork: its root covers a version of a
        forked sequence id the log does not keep (checked when the leaves are all here)."""
        originator, size = checkpoint.originator_node_id, checkpoint.tree_size
        if await self._port.tree_size(originator) < size:
            return None
        for sequence_id, leaves in (await self._port.fork_leaves(originator, size)).items():
            index = sequence_id - 1
            nodes = [(0, index), *merkle.perfect_nodes_for_inclusion(index, size)]
            hashes = await self._port.perfect(originator, nodes)
            proof = merkle.inclusion_proof(index, size, _lookup(hashes))
            others = [leaf for leaf in leaves if leaf != hashes[(0, index)]]
            covered = forked_version_covered(checkpoint, sequence_id, proof, others)
            if covered is not None:
                return (
                    f"fork evidence: the root at {size} covers version 0x{covered.hex()} of "
                    f"sequence id {sequence_id}, not the one the fork rule keeps"
                )
        return None

    async def settle(self, originator: int, sequence_id: int) -> None:
        """The log changed at `sequence_id` (a fork): re-judges the checkpoints stored from
        there up to the tree held, as if each had come now."""
        async with self._lock(originator):
            await self._settle(originator, sequence_id)

    async def _settle(self, originator: int, first_size: int) -> None:
        held = await self._port.tree_size(originator)
        stored = await self._port.checkpoints_between(originator, first_size, held)
        if not stored:
            return
        previous = await self._port.accepted_below(originator, first_size)
        changes: list[tuple[int, str | None]] = []
        for size in sorted({s.checkpoint.tree_size for s in stored}):
            root = await self._root(originator, size)
            accepted: Checkpoint | None = None
            for s in (s for s in stored if s.checkpoint.tree_size == size):
                problem = await self._judge(previous, s.checkpoint, root, accepted is not None)
                if problem is None:
                    accepted = s.checkpoint
                if problem != s.conflict:
                    changes.append((s.id, problem))
            previous = accepted or previous
        if changes:
            await self._port.set_conflicts(changes)
            log.warning("checkpoints_settled", originator=originator, changed=len(changes))

    async def _judge(
        self, previous: Checkpoint | None, checkpoint: Checkpoint, root: bytes, taken: bool
    ) -> str | None:
        """None: `checkpoint` is the log's at its size; else why it is kept aside."""
        if root != checkpoint.root:
            return await self._fork_covered(checkpoint) or _root_differs(checkpoint.tree_size)
        if taken:
            return f"another checkpoint at {checkpoint.tree_size} is accepted"
        try:
            check_follows(previous, checkpoint)
        except CheckpointError as exc:
            return str(exc)
        return None


def _root_differs(size: int) -> str:
    return f"the root at {size} differs from the leaves stored here"
