"""Forks taken from peers during anti-entropy (replication.fork_sync), with fakes for the
peer and the store: nothing is paged when the digests agree, versions not kept here go to
the fork intake, a peer without ForkApi is skipped."""

from __future__ import annotations

from collections.abc import Sequence

from xnode.core.forks import Fork, ForkDigest, envelope_hash, fork_digest, log_keeps
from xnode.replication.fork_sync import PAGE, ForkSync


class Kept:
    """The log and the fork evidence of one originator held here; `take` is the intake."""

    def __init__(self, log: dict[int, bytes]) -> None:
        self.log = log
        self.forks: dict[int, set[bytes]] = {}
        self.taken: list[tuple[bytes, bytes]] = []

    async def digest(self, originator: int) -> ForkDigest:
        return fork_digest((s, envelope_hash(v)) for s, vs in self.forks.items() for v in vs)

    async def kept_versions(
        self, originator: int, sequence_ids: Sequence[int]
    ) -> dict[int, set[bytes]]:
        found = {s: self.forks[s] for s in sequence_ids if s in self.forks}
        return {s: {envelope_hash(v) for v in vs} for s, vs in found.items()}

    async def stored_envelopes(
        self, originator: int, sequence_ids: Sequence[int]
    ) -> dict[int, bytes]:
        return {s: self.log[s] for s in sequence_ids if s in self.log}

    async def take(self, originator: int, stored: bytes, other: bytes) -> None:
        assert self.log[originator_seq(other)] == stored
        self.taken.append((stored, other))
        seq = originator_seq(other)
        self.forks.setdefault(seq, set()).update({stored, other})
        self.log[seq] = log_keeps(stored, other)


def originator_seq(raw: bytes) -> int:
    return int(raw.split(b":")[0])


class Peer:
    node_id = 200

    def __init__(self, forks: list[Fork], digest: bool = True, api: bool = True) -> None:
        self._forks = forks
        self._digest = digest
        self._api = api
        self.pages: list[int] = []

    async def fork_digest(self, originator: int) -> ForkDigest | None:
        if not (self._digest and self._api):
            return None
        return fork_digest(
            (f.sequence_id, envelope_hash(v)) for f in self._forks for v in f.versions
        )

    async def forks(self, originator: int, after_sequence_id: int, limit: int) -> list[Fork] | None:
        if not self._api:
            return None
        self.pages.append(after_sequence_id)
        return [f for f in self._forks if f.sequence_id > after_sequence_id][:limit]


def fork(seq: int, *tags: bytes) -> Fork:
    versions = sorted((b"%d:" % seq + t for t in tags), key=envelope_hash)
    return Fork(400, seq, tuple(versions))


async def test_versions_not_kept_here_go_to_the_intake_and_then_nothing_is_paged() -> None:
    forks = [fork(2, b"a", b"b"), fork(5, b"a", b"b", b"c")]
    here = Kept({2: forks[0].versions[1], 5: forks[1].versions[0], 7: b"7:a"})
    peer = Peer(forks)
    sync = ForkSync(here, here, here.take)
    first = await sync.sync(peer, 400)
    assert (first.paged, first.sent, first.waiting) == (True, 3, 0)
    assert {s: set(f.versions) for s, f in zip((2, 5), forks, strict=True)} == here.forks
    assert here.log[2] == forks[0].versions[0] and here.log[5] == forks[1].versions[0]
    peer.pages.clear()
    again = await sync.sync(peer, 400)
    assert (again.paged, again.sent, peer.pages) == (False, 0, [])


async def test_a_sequence_id_not_held_yet_waits_for_repair() -> None:
    here = Kept({})
    first = await ForkSync(here, here, here.take).sync(Peer([fork(3, b"a", b"b")]), 400)
    assert (first.sent, first.waiting, here.taken) == (0, 2, [])


async def test_peers_without_the_digest_are_paged_and_without_fork_api_skipped() -> None:
    forks = [fork(s, b"a", b"b") for s in range(1, PAGE + 3)]
    here = Kept({f.sequence_id: f.versions[0] for f in forks})
    old = Peer(forks, digest=False)
    outcome = await ForkSync(here, here, here.take).sync(old, 400)
    assert outcome.sent == len(forks) and old.pages == [0, PAGE]
    none = Kept({1: b"1:a"})
    skipped = await ForkSync(none, none, none.take).sync(Peer(forks, api=False), 400)
    assert (skipped.sent, none.taken) == (0, [])


async def test_a_peer_without_forks_is_not_paged() -> None:
    here = Kept({1: b"1:a"})
    here.forks[1] = {b"1:a", b"1:b"}
    peer = Peer([])
    outcome = await ForkSync(here, here, here.take).sync(peer, 400)
    assert (outcome.paged, peer.pages) == (False, [])
