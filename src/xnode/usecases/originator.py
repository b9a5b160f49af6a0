"""Group commit for originating: concurrent publishes share one transaction.

Requests queue up while the previous batch commits; the next batch takes everything waiting
(up to `max_batch` envelopes). A caller is answered only after its batch has committed.
Up to `in_flight` batches are appended at once (the sequencer signs one while Postgres writes
and flushes the one before), and their commits are reported in the order they were taken.
A second batch starts early only when at least `PIPELINE_MIN` envelopes wait: a small group
costs more in its own statement and flush than signing it beside the previous one saves
(single publishes at 64 in flight measured slower when every group was pipelined).

Before a group is taken, the event loop runs on while publishes keep arriving (`_gather`):
grpc's server hands the loop about one call every few turns, so a group taken at once held
a couple of single publishes, each group paying its own statement, flush and Python.
Gathering makes groups an order of magnitude larger (docs/benchmarks.md, "Measurements
behind choices in the code"). A lone publish waits only the few idle turns it takes to see
that nothing else comes, and no publish waits more than GATHER_SECONDS for others.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import structlog

from xnode.core.envelopes import IndexedEnvelope, Originable, stored_twin
from xnode.core.errors import Reason, Rejected

# Called for the next batch before the previous one has returned: it must store batches in
# call order, and fail (or sign again) a batch whose predecessor failed.
Append = Callable[[Sequence[Originable]], Awaitable[list[IndexedEnvelope]]]
Committed = Callable[[list[IndexedEnvelope]], Awaitable[None]]
# The originator envelopes this originator stored around payer envelopes of these digests
# (migration 0010), serialized; those it holds none of are left out.
Held = Callable[[Sequence[bytes]], Awaitable[dict[bytes, bytes]]]

log = structlog.get_logger(__name__)

STOPPED_DETAIL = "this node's group commit stopped on an internal error; publish to another node"


def _refused_replay(detail: str) -> Rejected:
    return Rejected(Reason.ALREADY_PUBLISHED, f"{detail}; a payer envelope is stored once")


def _stored_answer(
    request: Sequence[Originable], held: dict[bytes, bytes]
) -> Sequence[IndexedEnvelope] | Rejected | None:
    """What a request some of whose payer envelopes this originator holds already is told:
    None when it holds none of them. A retry of a publish whose answer was lost (every
    envelope held, byte for byte) is answered with the envelopes stored, storing and billing
    nothing again; anything else is refused whole: a held envelope sent with other unsigned
    fields (its retention), or beside envelopes not held."""
    found = [(i, e, held[e.payer_digest]) for i, e in enumerate(request) if e.payer_digest in held]
    if not found:
        return None
    answer = []
    for i, payer, stored_raw in found:
        twin = stored_twin(payer, stored_raw)
        if twin is None:
            return _refused_replay(
                f"payer_envelopes[{i}] was published here already (its payer signed the same "
                "client envelope for this originator) with other unsigned fields, such as "
                "message_retention_days, which its signature does not cover"
            )
        answer.append(twin)
    if len(found) < len(request):
        i, _, _ = found[0]
        return _refused_replay(
            f"payer_envelopes[{i}] was published here already as sequence id "
            f"{answer[0].sequence_id}, beside envelopes that were not: publish those without it"
        )
    return answer


PIPELINE_MIN = 128  # envelopes waiting for a batch to start before the previous has committed
GATHER_MIN = 32  # envelopes waiting: the group is taken without gathering more
GATHER_TURNS = 128  # loop turns a group gathers at most
GATHER_PATIENCE = 8  # a run of more idle turns (no new publish) ends the gathering
# The longest a publish waits for others to join its group: turns are slow when the loop is
# busy with other calls, and a trickle of publishes within the patience would otherwise hold
# the first one for 128 of them. Under a benchmark's steady singles a group gathers within
# this cap, so it costs them nothing; a shorter one split their groups.
GATHER_SECONDS = 0.010


@dataclass(slots=True)
class _Request:
    envelopes: Sequence[Originable]
    result: asyncio.Future[list[IndexedEnvelope]]

    def answer(self, outcome: list[IndexedEnvelope] | BaseException) -> None:
        """Tells the caller, unless it is gone: a publish cancelled meanwhile (its client's
        deadline passed) cancelled its future, and setting a cancelled future raises, which
        would end the group commit's loop and leave every later publish waiting forever."""
        if self.result.done():
            return
        if isinstance(outcome, BaseException):
            self.result.set_exception(outcome)
        else:
            self.result.set_result(outcome)


@dataclass
class BatchStats:
    """Observers for metrics; called once per committed batch."""

    on_batch: list[Callable[[int, float], None]] = field(default_factory=list)


class Originator:
    def __init__(
        self,
        append: Append,
        committed: Committed,
        max_batch: int = 1000,
        stats: BatchStats | None = None,
        in_flight: int = 2,
        pipeline_min: int = PIPELINE_MIN,
        gather_turns: int = GATHER_TURNS,
        gather_seconds: float = GATHER_SECONDS,
        held: Held | None = None,
    ) -> None:
        """`gather_turns` 0: a group takes what waits at once (tests that count groups).
        `held`: where payer envelopes already stored are looked up (None: not checked)."""
        self._append = append
        self._held = held
        # Digests of the payer envelopes taken and not yet committed (or failed), with their
        # request's answer: a replay arriving meanwhile waits for it, then finds them stored.
        self._publishing: dict[bytes, asyncio.Future[list[IndexedEnvelope]]] = {}
        self._gather_turns = gather_turns
        self._gather_seconds = gather_seconds
        self._in_flight = in_flight
        self._pipeline_min = pipeline_min
        self._committed = committed
        self._max_batch = max_batch
        self._stats = stats or BatchStats()
        self._pending: list[_Request] = []
        self._taken: list[_Request] = []  # the group being looked up, not yet committing
        self._wake = asyncio.Event()
        self._closing = False
        self._stopped = False  # the loop ended on an error: publishes are refused, not held
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="originator")
        self._task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        """A loop ended by an error leaves no publish waiting forever for it: those waiting,
        and those to come, are refused UNAVAILABLE, and the error is logged once."""
        error = asyncio.CancelledError() if task.cancelled() else task.exception()
        if error is None:  # returned: closed, every accepted publish answered
            return
        self._stopped = True
        waiting = [*self._taken, *self._pending]
        log.error("group_commit_stopped", error=repr(error), waiting=len(waiting))
        refused = Rejected(Reason.UNAVAILABLE, STOPPED_DETAIL)
        for request in waiting:
            request.answer(refused)
        self._taken, self._pending = [], []

    @property
    def closing(self) -> bool:
        """Publishes are refused from now on (the node drains)."""
        return self._closing

    async def publish(self, envelopes: Sequence[Originable]) -> list[IndexedEnvelope]:
        digests = [e.payer_digest for e in envelopes if e.payer_digest]
        if len(set(digests)) < len(digests):
            raise _refused_replay("the request lists one payer envelope twice")
        publishing = self._publishing
        while twins := {f for d in digests if (f := publishing.get(d)) and not f.done()}:
            await asyncio.wait(twins)  # then found stored, or storable again if it failed
        if self._closing:  # checked after any wait: a closed group commit takes nothing
            raise Rejected(Reason.UNAVAILABLE, "node is shutting down; publish to another node")
        if self._stopped:
            raise Rejected(Reason.UNAVAILABLE, STOPPED_DETAIL)
        request = _Request(envelopes, asyncio.get_running_loop().create_future())
        publishing.update((d, request.result) for d in digests)
        try:
            self._pending.append(request)
            self._wake.set()
            return await request.result
        finally:
            for d in digests:
                if publishing.get(d) is request.result:
                    del publishing[d]

    async def close(self) -> None:
        """Stops taking publishes and waits until every accepted one has committed."""
        self._closing = True
        self._wake.set()
        if self._task is not None and not self._stopped:
            await self._task

    def _waiting(self) -> int:
        return sum(len(r.envelopes) for r in self._pending)

    def _take_batch(self) -> list[_Request]:
        taken: list[_Request] = []
        size = 0
        while self._pending and (
            not taken or size + len(self._pending[0].envelopes) <= self._max_batch
        ):
            request = self._pending.pop(0)
            taken.append(request)
            size += len(request.envelopes)
        return taken

    async def _run(self) -> None:
        slots = asyncio.Semaphore(self._in_flight)
        previous: asyncio.Task[None] | None = None
        while True:
            if not self._pending:
                if self._closing:
                    if previous is not None:
                        await previous
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            in_flight = previous is not None and not previous.done()
            if previous is not None and in_flight and self._waiting() < self._pipeline_min:
                await asyncio.wait([previous])  # too few to pipeline: they join a later group
                continue
            await slots.acquire()
            await self._gather()
            # Looked up here, one batch at a time, so batches reach `append` in the order
            # taken (the previous one's write goes on meanwhile).
            self._taken = self._take_batch()
            batch = await self._not_held(self._taken)
            self._taken = []
            if not batch:
                slots.release()
                continue
            previous = asyncio.create_task(self._commit(batch, previous, slots))

    async def _gather(self) -> None:
        """Lets the loop run while publishes keep arriving: until GATHER_MIN envelopes wait,
        more than GATHER_PATIENCE turns in a row bring none, or `gather_turns` or
        `gather_seconds` have passed."""
        idle = 0
        loop = asyncio.get_running_loop()
        until = loop.time() + self._gather_seconds
        waiting = self._waiting()
        for _ in range(self._gather_turns):
            if waiting >= GATHER_MIN or self._closing or loop.time() > until:
                return
            await asyncio.sleep(0)
            before, waiting = waiting, self._waiting()  # counted once per turn
            idle = idle + 1 if waiting == before else 0
            if idle > GATHER_PATIENCE:
                return

    async def _not_held(self, batch: list[_Request]) -> list[_Request]:
        """The requests of `batch` none of whose payer envelopes is stored already; the
        others are answered with what is stored, or refused (_stored_answer). Looked up
        after their digests joined `_publishing`, so a replay either waited there for its
        twin or finds it committed."""
        if self._held is None:
            return batch
        digests = [e.payer_digest for r in batch for e in r.envelopes if e.payer_digest]
        try:
            held = await self._held(digests) if digests else {}
        except Exception as exc:  # the store: the batch fails as its append would
            for request in batch:
                request.answer(exc)
            return []
        if not held:
            return batch
        kept = []
        for request in batch:
            try:
                answer = _stored_answer(request.envelopes, held)
            except Exception as exc:  # a stored envelope that does not parse: this one fails
                request.answer(exc)
                continue
            if answer is None:
                kept.append(request)
            else:
                request.answer(answer if isinstance(answer, Rejected) else list(answer))
        return kept

    async def _commit(
        self, batch: list[_Request], previous: asyncio.Task[None] | None, slot: asyncio.Semaphore
    ) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        flat = [e for r in batch for e in r.envelopes]
        try:
            originated = await self._append(flat)
        except Exception as exc:
            slot.release()
            for request in batch:
                request.answer(exc)
            if previous is not None:
                await previous  # the next batch's commit is reported after the one before
            return
        slot.release()
        offset = 0
        for request in batch:
            part = originated[offset : offset + len(request.envelopes)]
            offset += len(request.envelopes)
            request.answer(part)
        if previous is not None:
            await previous  # commits are reported in the order they were stored
        await self._committed(originated)
        for observe in self._stats.on_batch:
            observe(len(flat), loop.time() - started)
