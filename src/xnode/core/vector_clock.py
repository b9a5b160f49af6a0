"""The node's vector clock in memory: what it has stored, per originator."""

from __future__ import annotations

from collections.abc import Mapping

from xnode.core.cursors import Cursor


class NodeClock:
    def __init__(self, cursor: Cursor) -> None:
        self.value = cursor

    def merge(self, tops: Mapping[int, int]) -> None:
        self.value = self.value.merge(tops)

    def rewind(self, tops: Mapping[int, int]) -> None:
        """Lowers entries to `tops`: a chain re-org removed payloads (xnode.chain.indexer)."""
        entries = self.value.to_dict()
        for node_id, seq in tops.items():
            entries[node_id] = min(seq, entries.get(node_id, 0))
        self.value = Cursor(entries)
