"""Live delivery: committed envelopes are pushed to matching subscribers, per originator in
sequence order with no gap (a gap is filled from the store before anything after it).

A commit's envelopes reach every listener of a topic (or an originator) as one shared `Batch`,
framed once however many streams carry it. A listener's batches wait in its backlog until its
stream takes them all as one frame; a listener whose oldest waiting batch is older than its
lag limit has fallen behind and is told so (its subscription decides what that means)."""

from __future__ import annotations

import asyncio
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from xnode.core import wire
from xnode.core.clock import SYSTEM_CLOCK, Clock
from xnode.core.cursors import Cursor
from xnode.core.envelopes import StoredEnvelope
from xnode.core.retention import is_expired

FetchRange = Callable[[int, int, int], Awaitable[list[StoredEnvelope]]]

MAX_LAG_S = 5.0
BATCH_INTERVAL_S = 0.05
# A commit that reaches this many streams makes the next ones within the batch interval wait
# for it: below it, every commit is offered at once (a lone subscriber's latency is untouched).
MANY_STREAMS = 100
# Offers made in one loop turn: each wakes a stream that writes in the next turn, and a turn
# that woke every stream of a busy topic held every other call (a publish's next step) until
# all their writes were started. The rest wait a turn each, in order.
OFFERS_PER_TURN = 16
K = TypeVar("K", bytes, int)


class Batch:
    """Envelopes delivered together, in sequence order per originator. `framed` is their
    encoding as repeated field 1 (what every subscribe response carries), built once and
    shared by every stream that sends this batch."""

    __slots__ = ("_framed", "envelopes")

    def __init__(self, envelopes: list[StoredEnvelope]) -> None:
        self.envelopes = envelopes
        self._framed: bytes | None = None

    def __len__(self) -> int:
        return len(self.envelopes)

    @property
    def framed(self) -> bytes:
        if self._framed is None:
            self._framed = wire.repeated(1, (e.raw for e in self.envelopes))
        return self._framed


@dataclass(eq=False)
class Listener:
    """One subscription's live inbox: the batches its stream has not taken yet. Once the
    oldest of them has waited longer than `max_lag_s` the listener has fallen behind: its
    backlog is dropped and nothing more is kept for it until the subscription catches up
    from the store or ends."""

    topics: frozenset[bytes] = frozenset()
    originators: frozenset[int] = frozenset()
    max_lag_s: float = MAX_LAG_S
    fell_behind: bool = False
    backlog: list[Batch] = field(default_factory=list)
    oldest_s: float = 0.0  # when the first batch of the backlog arrived (monotonic)
    lag_s: float = 0.0  # how far behind it was when it fell behind
    # Told at once, while its stream may still be stuck in a write that never completes.
    on_fell_behind: Callable[[float], None] | None = None
    _ready: asyncio.Event = field(default_factory=asyncio.Event)
    single_key: bool = field(init=False)  # one topic or one originator: one batch a commit

    def __post_init__(self) -> None:
        self.single_key = len(self.topics) + len(self.originators) == 1

    def offer(self, batch: Batch, now_s: float) -> None:
        if self.fell_behind:
            return
        if not self.backlog:
            self.oldest_s = now_s
        elif now_s - self.oldest_s > self.max_lag_s:
            self.fell_behind, self.lag_s = True, now_s - self.oldest_s
            self.backlog = []
            self._ready.set()  # wakes the reader so it notices
            if self.on_fell_behind is not None:
                self.on_fell_behind(self.lag_s)
            return
        self.backlog.append(batch)
        self._ready.set()

    def take(self) -> list[Batch]:
        """Every batch waiting, oldest first: one frame for all of them."""
        taken, self.backlog = self.backlog, []
        self._ready.clear()
        return taken

    def wake(self) -> None:
        self._ready.set()

    async def ready(self) -> None:
        await self._ready.wait()

    def caught_up(self) -> None:
        """The subscription reads from the store again: live delivery starts afresh."""
        self.fell_behind = False


class Fanout:
    def __init__(
        self,
        fetch_range: FetchRange,
        delivered: Cursor,
        clock: Clock = SYSTEM_CLOCK,
        batch_interval_s: float = BATCH_INTERVAL_S,
    ) -> None:
        """`batch_interval_s`: after a commit that reached many streams, the next commits
        wait until this long after it and reach the streams together (each stream writes one
        frame for them: a frame costs far more than the envelopes in it)."""
        self._fetch_range = fetch_range
        self._clock = clock
        self._delivered = delivered.to_dict()
        self._by_topic: dict[bytes, set[Listener]] = defaultdict(set)
        self._by_originator: dict[int, set[Listener]] = defaultdict(set)
        self._lock = asyncio.Lock()
        self._interval_s = batch_interval_s
        self._waiting: list[StoredEnvelope] = []  # for the next flush
        self._flush_due: asyncio.TimerHandle | None = None
        self._last_flush_s = float("-inf")
        self._busy = False  # the last flush reached many streams
        self._offers: deque[tuple[Listener, Batch, float]] = deque()  # in flush order
        self._offering: asyncio.Handle | None = None  # the next turn's share is planned

    @property
    def listener_count(self) -> int:
        return len(
            {x for s in (*self._by_topic.values(), *self._by_originator.values()) for x in s}
        )

    def register(self, listener: Listener) -> None:
        for topic in listener.topics:
            self._by_topic[topic].add(listener)
        for node_id in listener.originators:
            self._by_originator[node_id].add(listener)

    def unregister(self, listener: Listener) -> None:
        for topic in listener.topics:
            self._discard(self._by_topic, topic, listener)
        for node_id in listener.originators:
            self._discard(self._by_originator, node_id, listener)

    @staticmethod
    def _discard(index: dict[K, set[Listener]], key: K, listener: Listener) -> None:
        members = index.get(key)
        if members is not None:
            members.discard(listener)
            if not members:
                del index[key]

    async def committed(self, envelopes: Sequence[StoredEnvelope]) -> None:
        """Envelopes this process just committed, in sequence order per originator."""
        async with self._lock:
            await self._deliver_in_order(envelopes)

    async def caught_up_to(self, tops: dict[int, int]) -> None:
        """Another process committed up to these sequence ids; fetch and deliver the rest."""
        async with self._lock:
            for node_id, top in tops.items():
                have = self._delivered.get(node_id, 0)
                if top > have:
                    if self._by_topic or node_id in self._by_originator:
                        self._dispatch(await self._fetch_range(node_id, have, top))
                    # No listener could want them: not read back at all (each worker of a
                    # node hears of every other's commits). One that registers later reads
                    # them in its catch-up, which starts after it registered.
                    self._delivered[node_id] = max(top, self._delivered.get(node_id, 0))

    async def rewind(self, tops: dict[int, int]) -> None:
        """A chain re-org removed payloads above these sequence ids; their replacements
        (same ids, other content) must be delivered, not skipped as already seen."""
        async with self._lock:
            for node_id, top in tops.items():
                if self._delivered.get(node_id, 0) > top:
                    self._delivered[node_id] = top

    async def _deliver_in_order(self, envelopes: Iterable[StoredEnvelope]) -> None:
        fresh: list[StoredEnvelope] = []
        for env in envelopes:
            have = self._delivered.get(env.originator_node_id, 0)
            if env.sequence_id <= have:
                continue
            if env.sequence_id > have + 1:
                fresh += await self._fetch_range(env.originator_node_id, have, env.sequence_id - 1)
            fresh.append(env)
            self._delivered[env.originator_node_id] = env.sequence_id
        self._dispatch(fresh)

    def _dispatch(self, envelopes: list[StoredEnvelope]) -> None:
        if not envelopes:
            return
        self._waiting += envelopes
        if self._flush_due is not None:
            return  # joins the flush already planned
        wait_s = self._last_flush_s + self._interval_s - self._clock.monotonic_s()
        if self._busy and wait_s > 0:
            self._flush_due = asyncio.get_running_loop().call_later(wait_s, self._flush)
        else:
            self._flush()

    def _flush(self) -> None:
        envelopes, self._waiting, self._flush_due = self._waiting, [], None
        self._last_flush_s = self._clock.monotonic_s()
        self._busy = self._offer(envelopes) >= MANY_STREAMS

    def _offer(self, envelopes: list[StoredEnvelope]) -> int:
        """Offers the envelopes to their listeners; how many offers that took."""
        now = self._clock.now_s()
        by_topic: dict[bytes, list[StoredEnvelope]] = {}
        by_originator: dict[int, list[StoredEnvelope]] = {}
        for env in envelopes:
            if is_expired(env.expiry, now):
                continue  # as queries do: an expired envelope is never served
            if env.topic in self._by_topic:
                by_topic.setdefault(env.topic, []).append(env)
            if env.originator_node_id in self._by_originator:
                by_originator.setdefault(env.originator_node_id, []).append(env)
        arrived = self._clock.monotonic_s()
        several: dict[Listener, list[Batch]] = {}
        offers = _share(self._by_topic, by_topic, arrived, several, self._offers)
        offers += _share(self._by_originator, by_originator, arrived, several, self._offers)
        for listener, batches in several.items():
            self._offers.append(
                (listener, batches[0] if len(batches) == 1 else _merged(batches), arrived)
            )
        if self._offering is None:
            self._offer_share()
        return offers

    def _offer_share(self) -> None:
        """Makes this turn's share of the waiting offers and plans the next turn's."""
        waiting = self._offers
        for _ in range(min(len(waiting), OFFERS_PER_TURN)):
            listener, batch, arrived = waiting.popleft()
            listener.offer(batch, arrived)
        self._offering = (
            asyncio.get_running_loop().call_soon(self._offer_share) if waiting else None
        )


def _share(
    index: dict[K, set[Listener]],
    matched: dict[K, list[StoredEnvelope]],
    arrived: float,
    several: dict[Listener, list[Batch]],
    offers_out: deque[tuple[Listener, Batch, float]],
) -> int:
    """One batch per key, the same object for every listener of that key: queued for a
    listener of one key; gathered in `several` for a listener of several keys, which may
    match the same envelope twice."""
    offers = 0
    for key, envelopes in matched.items():
        batch = Batch(envelopes)
        listeners = index[key]
        offers += len(listeners)
        for listener in listeners:
            if listener.single_key:
                offers_out.append((listener, batch, arrived))
            else:
                several.setdefault(listener, []).append(batch)
    return offers


def _merged(batches: list[Batch]) -> Batch:
    """One listener's share of a dispatch that reached it through several topics or
    originators: each envelope once, in sequence order per originator."""
    seen: set[tuple[int, int]] = set()
    ordered = sorted(
        (e for b in batches for e in b.envelopes),
        key=lambda e: (e.originator_node_id, e.sequence_id),
    )
    unique = []
    for env in ordered:
        key = (env.originator_node_id, env.sequence_id)
        if key not in seen:
            seen.add(key)
            unique.append(env)
    return Batch(unique)
