"""The node's vector clock and its live fanout, kept current after each commit.

Every path that stores envelopes ends here: envelopes this process originated (the group
commit), envelopes replicated from peers or indexed from the chain, other processes'
commits to the same database (LISTEN/NOTIFY tops), and chain re-org rewinds. xnode.server hands
these bound methods to the originator, the replication worker, the chain indexer and the
commit listener."""

from __future__ import annotations

from collections.abc import Sequence

from xnode.core.cursors import Cursor
from xnode.core.envelopes import IndexedEnvelope, StoredEnvelope
from xnode.core.vector_clock import NodeClock
from xnode.usecases.fanout import BATCH_INTERVAL_S, Fanout, FetchRange


def _stored(envelopes: Sequence[IndexedEnvelope]) -> list[StoredEnvelope]:
    return [
        StoredEnvelope(e.originator_node_id, e.sequence_id, e.topic, e.raw, e.expiry)
        for e in envelopes
    ]


def _tops(envelopes: Sequence[StoredEnvelope]) -> dict[int, int]:
    tops: dict[int, int] = {}
    for e in envelopes:
        tops[e.originator_node_id] = max(e.sequence_id, tops.get(e.originator_node_id, 0))
    return tops


class NodeState:
    """What this node has stored (its vector clock) and who waits for it (the fanout)."""

    def __init__(
        self,
        node_id: int,
        stored: Cursor,
        fetch_range: FetchRange,
        batch_interval_s: float = BATCH_INTERVAL_S,
    ) -> None:
        self.node_id = node_id
        self.clock = NodeClock(stored)
        self.fanout = Fanout(fetch_range, stored, batch_interval_s=batch_interval_s)

    def vector_clock(self) -> Cursor:
        return self.clock.value

    async def originated(self, envelopes: list[IndexedEnvelope]) -> None:
        """A batch this process originated has committed (sequence order)."""
        self.clock.merge({self.node_id: envelopes[-1].sequence_id})
        await self.fanout.committed(_stored(envelopes))

    async def stored(self, envelopes: list[StoredEnvelope]) -> None:
        """Envelopes replicated from peers or indexed from the chain have committed."""
        self.clock.merge(_tops(envelopes))
        await self.fanout.committed(envelopes)

    async def committed_elsewhere(self, tops: dict[int, int]) -> None:
        """Another process sharing the database committed up to these sequence ids."""
        self.clock.merge(tops)
        await self.fanout.caught_up_to(tops)

    async def rewound(self, tops: dict[int, int]) -> None:
        """A chain re-org removed payloads above these sequence ids."""
        self.clock.rewind(tops)
        await self.fanout.rewind(tops)
