"""replication.losses: each repair looks into the next window of a log and retries what is
still lost from earlier windows, so a whole log is looked through and no loss is dropped."""

from __future__ import annotations

from collections.abc import Sequence

from xnode.core.reconciliation import SequenceRange
from xnode.replication import losses
from xnode.replication.losses import LossFinder


class Log:
    def __init__(self, top: int, lost: set[int]) -> None:
        self.top = top
        self.missing = lost
        self.asked: list[list[SequenceRange]] = []

    async def highest_leaf(self, originator: int) -> int:
        return self.top

    async def lost(
        self, originator: int, ranges: Sequence[SequenceRange], now_unix: int, limit: int
    ) -> list[tuple[int, bytes]]:
        self.asked.append(list(ranges))
        found = {s for r in ranges for s in range(r.first, r.last + 1)} & self.missing
        return [(s, b"leaf %d" % s) for s in sorted(found)][:limit]


async def test_windows_cover_the_log_and_wrap_and_losses_are_retried_until_repaired(
    monkeypatch: object,
) -> None:
    monkeypatch.setattr(losses, "WINDOW", 10)  # type: ignore[attr-defined]
    log = Log(25, {3, 14, 25})
    finder = LossFinder(log, lambda: 0)
    assert await finder.next(100) == {3: b"leaf 3"}
    assert log.asked[-1] == [SequenceRange(1, 10)]
    # 3 not repaired yet: asked again beside the next window
    assert set(await finder.next(100)) == {3, 14}
    assert log.asked[-1] == [SequenceRange(3, 3), SequenceRange(11, 20)]
    log.missing -= {3, 14}  # a peer served them
    assert set(await finder.next(100)) == {25}
    assert log.asked[-1] == [SequenceRange(3, 3), SequenceRange(14, 14), SequenceRange(21, 25)]
    assert set(await finder.next(100)) == {25}  # wrapped to the start, 25 still pending
    assert log.asked[-1] == [SequenceRange(25, 25), SequenceRange(1, 10)]


async def test_an_empty_log_asks_nothing() -> None:
    log = Log(0, set())
    assert await LossFinder(log, lambda: 0).next(100) == {}
    assert log.asked == []
