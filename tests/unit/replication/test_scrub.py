"""replication.scrub over a fake store: each leaf judged against what is held for it, bad
bytes withdrawn before anything else, losses handed to repair, passes round and round."""

from __future__ import annotations

from tests.unit.replication.test_anti_entropy import signed
from xnode.core.leaves import FORMAT_V1, Held, HeldLeaf, envelope_leaf
from xnode.replication.scrub import Scrub

RAWS = {s: signed(s).raw for s in range(1, 8)}
NOW = 1_000
EXPIRY = {"ahead": NOW + 1, "passed": NOW}


class Source:
    def __init__(self, rows: list[HeldLeaf]) -> None:
        self.rows = rows
        self.withdrawn: list[int] = []
        self.pages: list[int] = []

    async def page(self, after: tuple[int, int], limit: int) -> list[HeldLeaf]:
        self.pages.append(limit)
        return [r for r in self.rows if (r.originator_node_id, r.sequence_id) > after][:limit]

    async def withdraw(self, row: HeldLeaf) -> bool:
        self.withdrawn.append(row.sequence_id)
        return True


def held(s: int, raw: bytes | None, expiry: int | None = EXPIRY["ahead"]) -> HeldLeaf:
    return HeldLeaf(100, s, envelope_leaf(RAWS[s]), expiry, raw)


def rows() -> list[HeldLeaf]:
    return [
        held(1, RAWS[1]),
        held(2, RAWS[3]),  # bytes its leaf does not commit to
        held(3, None),  # lost
        held(4, None, EXPIRY["passed"]),
        held(5, None, None),  # format 1, no envelope
        HeldLeaf(100, 6, envelope_leaf(RAWS[6], FORMAT_V1), None, RAWS[6]),
        held(7, RAWS[7]),
    ]


async def test_each_leaf_is_judged_and_bad_bytes_are_withdrawn_and_repaired() -> None:
    source = Source(rows())
    lost: list[tuple[int, list[int]]] = []
    scrub = Scrub(source, 0, lambda o, ids: lost.append((o, ids)), lambda: NOW)
    count = await scrub.one_pass()
    assert source.withdrawn == [2]
    assert lost == [(100, [2, 3])]
    assert count.held == {
        Held.MATCHES: 3,
        Held.MISMATCH: 1,
        Held.LOST: 1,
        Held.EXPIRED: 1,
        Held.FORMAT_1: 1,
    }
    assert count.withdrawn == 1 and count.checked == 7
    assert scrub.passes == 1


async def test_pages_follow_the_rate_and_passes_start_over() -> None:
    source = Source(rows())
    scrub = Scrub(source, 3, None, lambda: NOW)
    ended = [await scrub.step() for _ in range(3)]
    assert ended == [False, False, True]  # 3 + 3 + 1 leaves: the short page ends the pass
    assert source.pages == [3, 3, 3]
    assert not await scrub.step() and scrub.passes == 1  # the next pass starts at the top
