"""replication.scrub over a fake store: each leaf judged against what is held for it, bad
bytes withdrawn before anything else, losses handed to repair, passes round and round; the
node's own envelopes never withdrawn for their signature."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from tests.unit.replication.test_anti_entropy import KEY, signed
from xnode.core.crypto import SigningKey
from xnode.core.leaves import FORMAT_V1, Held, HeldLeaf, envelope_leaf
from xnode.observability.outage import DatabaseOutage
from xnode.replication.scrub import OWN_SIGNATURE_MISMATCH, OwnKey, Scrub, ScrubRefused

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


OTHER = SigningKey.generate()


async def test_refuses_to_start_while_the_node_s_key_is_not_its_registry_key() -> None:
    source = Source(rows())
    own = OwnKey(100, KEY.public_key)
    scrub = Scrub(source, 0, None, lambda: NOW, lambda: {100: OTHER.public_key}, own)
    with pytest.raises(ScrubRefused) as refused:
        await scrub.one_pass()
    message = str(refused.value)
    assert "node 100" in message
    assert "0x" + KEY.public_key.hex() in message and "0x" + OTHER.public_key.hex() in message
    with pytest.raises(ScrubRefused):
        scrub.start(DatabaseOutage(lambda: "db"))
    assert source.withdrawn == [] and source.pages == []


async def test_never_withdraws_its_own_envelopes_for_their_signature() -> None:
    """The registry turns to another key for this node while the scrub runs: its own
    envelopes are counted and kept; bytes their leaf does not commit to still go, and
    another originator's envelopes under a key not theirs still go."""
    keys = {100: KEY.public_key}

    class Rotating(Source):
        async def page(self, after: tuple[int, int], limit: int) -> list[HeldLeaf]:
            keys.update({100: OTHER.public_key, 200: OTHER.public_key})
            return await super().page(after, limit)

    source = Rotating([*rows(), HeldLeaf(200, 1, envelope_leaf(RAWS[1]), NOW + 1, RAWS[1])])
    scrub = Scrub(source, 0, None, lambda: NOW, lambda: keys, OwnKey(100, KEY.public_key))
    before = _mismatches()
    count = await scrub.one_pass()
    assert source.withdrawn == [2, 1]  # node 100's bad bytes, node 200's foreign signature
    assert count.own_signature_mismatches == 3  # 1, 6 and 7 match their leaves
    assert count.held[Held.MATCHES] == 3
    assert _mismatches() - before == 3


def _mismatches() -> float:
    labels = {"outcome": OWN_SIGNATURE_MISMATCH}
    return REGISTRY.get_sample_value("xnode_scrub_leaves_total", labels) or 0.0


async def test_a_node_without_a_registry_entry_or_read_only_scrubs_as_before() -> None:
    for own in (None, OwnKey(300, KEY.public_key)):
        source = Source(rows())
        scrub = Scrub(source, 0, None, lambda: NOW, lambda: {100: KEY.public_key}, own)
        count = await scrub.one_pass()
        assert source.withdrawn == [2] and count.own_signature_mismatches == 0
