"""Live delivery: committed envelopes are pushed to matching subscribers, per originator in
sequence order with no gap (a gap is filled from the store before anything after it)."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from xnode.core.clock import SYSTEM_CLOCK, Clock
from xnode.core.cursors import Cursor
from xnode.core.envelopes import StoredEnvelope
from xnode.core.retention import is_expired

FetchRange = Callable[[int, int, int], Awaitable[list[StoredEnvelope]]]

LIVE_QUEUE_BATCHES = 256
K = TypeVar("K", bytes, int)


@dataclass(eq=False)
class Listener:
    """One subscription's live inbox. On overflow it is marked lagged and emptied; the
    subscription then catches up from the store, so a slow reader loses nothing."""

    topics: frozenset[bytes] = frozenset()
    originators: frozenset[int] = frozenset()
    queue: asyncio.Queue[list[StoredEnvelope]] = field(
        default_factory=lambda: asyncio.Queue(LIVE_QUEUE_BATCHES)
    )
    lagged: bool = False

    def offer(self, batch: list[StoredEnvelope]) -> None:
        if self.lagged:
            return
        try:
            self.queue.put_nowait(batch)
        except asyncio.QueueFull:
            self.lagged = True
            while not self.queue.empty():
                self.queue.get_nowait()
            self.queue.put_nowait([])  # wakes the reader so it notices the lag


class Fanout:
    def __init__(
        self, fetch_range: FetchRange, delivered: Cursor, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self._fetch_range = fetch_range
        self._clock = clock
        self._delivered = delivered.to_dict()
        self._by_topic: dict[bytes, set[Listener]] = defaultdict(set)
        self._by_originator: dict[int, set[Listener]] = defaultdict(set)
        self._lock = asyncio.Lock()

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
        now = self._clock.now_s()
        per_listener: dict[Listener, list[StoredEnvelope]] = {}
        for env in envelopes:
            if is_expired(env.expiry, now):
                continue  # as queries do: an expired envelope is never served
            for listener in self._by_topic.get(env.topic, ()):
                per_listener.setdefault(listener, []).append(env)
            for listener in self._by_originator.get(env.originator_node_id, ()):
                per_listener.setdefault(listener, []).append(env)
        for listener, batch in per_listener.items():
            listener.offer(batch)
