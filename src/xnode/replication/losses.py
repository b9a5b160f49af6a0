"""Losses: leaves this node holds whose envelope it does not, before the expiry the leaf
commits to (leaf format 2, xnode.core.leaves). Fingerprints cannot see them (the leaves
agree with every peer's), so repair asks for them by name: each repair of an originator
looks into the next window of its log, and retries what is still lost from earlier windows,
so a whole log is looked through in (its size / WINDOW) repairs and a loss is fetched from
whichever peer still holds it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from xnode.core.reconciliation import SequenceRange, runs

WINDOW = 100_000  # sequence ids looked into per repair of one originator
MAX_LOST = 100_000  # losses fetched per repair; the rest wait for the next ones


class LostLeaves(Protocol):
    async def highest_leaf(self, originator: int) -> int: ...

    async def lost(
        self, originator: int, ranges: Sequence[SequenceRange], now_unix: int, limit: int
    ) -> list[tuple[int, bytes]]: ...


class LossFinder:
    """Per originator: where the last window ended, and the losses found not yet repaired."""

    def __init__(self, logs: LostLeaves, now_unix: Callable[[], int]) -> None:
        self._logs = logs
        self._now_unix = now_unix
        self._next: dict[int, int] = {}
        self._pending: dict[int, list[int]] = {}

    def add(self, originator: int, sequence_ids: list[int]) -> None:
        """Losses found elsewhere (the scrub): asked for at the next repair."""
        pending = self._pending.setdefault(originator, [])
        pending += [s for s in sequence_ids if s not in set(pending)]
        del pending[MAX_LOST:]

    async def next(self, originator: int) -> dict[int, bytes]:
        """The losses to fetch now: sequence id -> the leaf held here (what the fetched
        envelope must match)."""
        top = await self._logs.highest_leaf(originator)
        if top == 0:
            return {}
        first = self._next.get(originator, 1)
        if first > top:
            first = 1
        window = SequenceRange(first, min(first + WINDOW - 1, top))
        self._next[originator] = window.last + 1
        pending = [s for s in self._pending.get(originator, ()) if not first <= s <= window.last]
        found = await self._logs.lost(
            originator, [*runs(pending), window], self._now_unix(), MAX_LOST
        )
        self._pending[originator] = [s for s, _ in found]
        return dict(found)
