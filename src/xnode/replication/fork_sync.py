"""Forks spread by repair: range reconciliation compares logs, and a
log holds one version of a forked sequence id, so a node that missed a fork while it was
streamed and filled its log by repair would hold the winner only, never the conflict, and
never report it. So each anti-entropy pass, per originator and peer, compares the peer's
ForkApi digest with this node's; where they differ it pages the peer's forks and sends each
version not kept here through the fork intake the streamed forks use (`on_fork`: the
signature is checked, the deterministic rule settles the log, both versions are kept and
a DUPLICATE_SEQUENCE_ID report is filed). A version of a sequence id whose log holds
nothing here yet waits for repair to fill it (the next pass sends it then). A peer without
ForkApi (UNIMPLEMENTED) is skipped quietly; one without GetForkDigest is paged."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from xnode.core.forks import Fork, ForkDigest, envelope_hash

# (originator, envelope stored here, the other one) of a fork found
OnFork = Callable[[int, bytes, bytes], Awaitable[None]]

PAGE = 1000  # forks per QueryForks page (the API's most)


class StoredBytes(Protocol):
    async def stored_envelopes(
        self, originator: int, sequence_ids: Sequence[int]
    ) -> dict[int, bytes]: ...


class ForkPeer(Protocol):
    node_id: int

    async def fork_digest(self, originator: int) -> ForkDigest | None:
        """None when the peer does not serve GetForkDigest."""
        ...

    async def forks(self, originator: int, after_sequence_id: int, limit: int) -> list[Fork] | None:
        """None when the peer does not serve ForkApi."""
        ...


class KeptForks(Protocol):
    """The forks kept here (store.forks.ForkStore)."""

    async def digest(self, originator: int) -> ForkDigest: ...

    async def kept_versions(
        self, originator: int, sequence_ids: Sequence[int]
    ) -> dict[int, set[bytes]]: ...


@dataclass
class ForkSyncOutcome:
    paged: bool = False  # the digests differed (or the peer has none to compare)
    sent: int = 0  # versions sent to the fork intake
    waiting: int = 0  # versions of sequence ids the log here does not hold yet


class ForkSync:
    def __init__(self, kept: KeptForks, stored: StoredBytes, on_fork: OnFork) -> None:
        self._kept = kept
        self._stored = stored
        self._on_fork = on_fork

    async def sync(self, peer: ForkPeer, originator: int) -> ForkSyncOutcome:
        outcome = ForkSyncOutcome()
        theirs = await peer.fork_digest(originator)
        if theirs is not None and (
            theirs.versions == 0 or theirs == await self._kept.digest(originator)
        ):
            return outcome
        outcome.paged = True
        after = 0
        while True:
            page = await peer.forks(originator, after, PAGE)
            if not page:  # None: no ForkApi there
                return outcome
            await self._take(originator, page, outcome)
            if len(page) < PAGE:
                return outcome
            after = page[-1].sequence_id

    async def _take(self, originator: int, page: list[Fork], outcome: ForkSyncOutcome) -> None:
        sequence_ids = [f.sequence_id for f in page]
        in_log = await self._stored.stored_envelopes(originator, sequence_ids)
        kept = await self._kept.kept_versions(originator, sequence_ids)
        for fork in page:
            stored = in_log.get(fork.sequence_id)
            held = set(kept.get(fork.sequence_id, ()))
            for version in fork.versions:
                if version == stored or envelope_hash(version) in held:
                    continue
                if stored is None:
                    outcome.waiting += 1
                    continue
                outcome.sent += 1
                # The intake keeps `version` and settles the log: what the log holds next
                # is compared against for the next version.
                await self._on_fork(originator, stored, version)
                held |= {envelope_hash(stored), envelope_hash(version)}
                now = await self._stored.stored_envelopes(originator, [fork.sequence_id])
                stored = now.get(fork.sequence_id, stored)
