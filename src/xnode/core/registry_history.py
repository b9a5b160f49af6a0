"""The NodeRegistry over time, as its events tell it, and the council's judgement of judged
reports against it (XIP-49 3.1.1, 3.2.7).

The contract fixes a node's key when the node is added (NodeAdded) and changes only its
`enabled` flag afterwards (NodeStatusChanged, on every call). Replaying both events with
their blocks' timestamps says which key a node signs with and whether it was enabled at
any moment: what the council judges a window of reports against. Nothing here comes from a
node's export (an operator could write anything there)."""

from __future__ import annotations

import json
import math
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from xnode.core.constants import NS_PER_SECOND
from xnode.core.crypto import PUBLIC_KEY_LENGTH
from xnode.core.registry import RegistryKeys

# The default share of the enabled nodes (other than the accused) that must report a node
# in one window before a judged report flags it. XIP-49 3.2.7 asks for "a sufficiently large
# sample" of nodes; more than a third means nodes that are byzantine, fewer than a third as
# the network's safety already assumes, cannot flag an honest node by themselves.
DEFAULT_JUDGED_SHARE = Fraction(1, 3)


class RegistryHistoryError(ValueError):
    """A registry snapshot that does not read; the message says where."""


@dataclass(frozen=True, slots=True)
class NodeHistory:
    node_id: int
    public_key: bytes
    added_s: int  # the block time of its NodeAdded event
    # (block time, enabled) of every NodeStatusChanged event, in chain order.
    status_changes: tuple[tuple[int, bool], ...] = ()

    def __post_init__(self) -> None:
        if len(self.public_key) != PUBLIC_KEY_LENGTH or self.public_key[0] != 4:
            raise RegistryHistoryError(f"node {self.node_id}: malformed public key")
        times = [t for t, _ in self.status_changes]
        if times != sorted(times) or (times and times[0] < self.added_s):
            raise RegistryHistoryError(f"node {self.node_id}: status changes out of order")

    def enabled_at(self, ns: int) -> bool:
        """Enabled at `ns`: added by then, and its last status change by then enabled it."""
        if ns < self.added_s * NS_PER_SECOND:
            return False
        times = [t * NS_PER_SECOND for t, _ in self.status_changes]
        last = bisect_right(times, ns)
        return True if last == 0 else self.status_changes[last - 1][1]

    def enabled_throughout(self, start_ns: int, end_ns: int) -> bool:
        """Enabled at `start_ns` and not disabled before `end_ns`."""
        if not self.enabled_at(start_ns):
            return False
        return all(
            enabled for t, enabled in self.status_changes if start_ns <= t * NS_PER_SECOND < end_ns
        )

    def enabled_during(self, start_ns: int, end_ns: int) -> bool:
        """Enabled at some moment of [start_ns, end_ns)."""
        if self.enabled_at(start_ns):
            return True
        return (
            any(
                enabled and start_ns <= t * NS_PER_SECOND < end_ns
                for t, enabled in self.status_changes
            )
            or start_ns <= self.added_s * NS_PER_SECOND < end_ns
        )


@dataclass(frozen=True, slots=True)
class RegistryHistory:
    """Every node the contract ever added, read up to `block` (time `block_time_s`)."""

    nodes: Mapping[int, NodeHistory]
    chain_id: int = 0
    node_registry: str = ""
    block: int = 0
    block_time_s: int = 0

    def keys(self) -> RegistryKeys:
        """node id -> its registry key: what signatures are checked against (a disabled
        node's past signatures stay its own)."""
        return {n: (h.public_key,) for n, h in self.nodes.items()}

    def enabled_throughout(self, node_id: int, start_ns: int, end_ns: int) -> bool:
        node = self.nodes.get(node_id)
        return node is not None and node.enabled_throughout(start_ns, end_ns)

    def enabled_during(self, start_ns: int, end_ns: int) -> list[int]:
        return sorted(n for n, h in self.nodes.items() if h.enabled_during(start_ns, end_ns))

    def to_json(self) -> str:
        nodes = [
            {
                "node_id": h.node_id,
                "public_key": "0x" + h.public_key.hex(),
                "added_s": h.added_s,
                "status_changes": [[t, e] for t, e in h.status_changes],
            }
            for h in sorted(self.nodes.values(), key=lambda h: h.node_id)
        ]
        return json.dumps(
            {
                "chain_id": self.chain_id,
                "node_registry": self.node_registry,
                "block": self.block,
                "block_time_s": self.block_time_s,
                "nodes": nodes,
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str) -> RegistryHistory:
        try:
            data = json.loads(text)
            nodes = [
                NodeHistory(
                    int(n["node_id"]),
                    bytes.fromhex(str(n["public_key"]).removeprefix("0x")),
                    int(n["added_s"]),
                    tuple((int(t), bool(e)) for t, e in n["status_changes"]),
                )
                for n in data["nodes"]
            ]
            return cls(
                {n.node_id: n for n in nodes},
                int(data["chain_id"]),
                str(data["node_registry"]),
                int(data["block"]),
                int(data["block_time_s"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise RegistryHistoryError(f"not a registry snapshot: {exc}") from None


@dataclass(frozen=True, slots=True)
class RegistryEvent:
    """One NodeRegistry event as the chain ordered it: NodeAdded carries the key,
    NodeStatusChanged the flag."""

    block_time_s: int
    node_id: int
    public_key: bytes | None = None  # NodeAdded
    enabled: bool | None = None  # NodeStatusChanged


def replay(events: Iterable[RegistryEvent]) -> dict[int, NodeHistory]:
    """The history the events tell, in chain order. A status change of a node never added
    (impossible on the contract) is ignored rather than invented into a node."""
    added: dict[int, tuple[bytes, int]] = {}
    changes: dict[int, list[tuple[int, bool]]] = {}
    for event in events:
        if event.public_key is not None and event.node_id not in added:
            added[event.node_id] = (event.public_key, event.block_time_s)
        elif event.enabled is not None and event.node_id in added:
            changes.setdefault(event.node_id, []).append((event.block_time_s, event.enabled))
    return {n: NodeHistory(n, key, t, tuple(changes.get(n, ()))) for n, (key, t) in added.items()}


# --- judged reports: liveness and withholding accusations ------------------------------------


def reporters_needed(enabled_others: int, share: Fraction = DEFAULT_JUDGED_SHARE) -> int:
    """Distinct reporters that flag a node: more than `share` of the other enabled nodes,
    and at least two (one node's word is never a verdict)."""
    return max(2, math.floor(share * enabled_others) + 1)


@dataclass(frozen=True, slots=True)
class Judgement:
    """A window of judged reports against one node, as the council weighs it."""

    counted: tuple[int, ...]  # reporters enabled throughout the window, the accused excluded
    enabled_others: int  # nodes enabled during the window, the accused excluded
    needed: int

    @property
    def flagged(self) -> bool:
        return len(self.counted) >= self.needed


def judge_window(
    accused: int,
    reporters: Sequence[int],
    start_ns: int,
    end_ns: int,
    history: RegistryHistory,
    share: Fraction = DEFAULT_JUDGED_SHARE,
) -> Judgement:
    """Whether distinct `reporters` (hosts whose signature the registry key verified) flag
    `accused` in [start_ns, end_ns). A reporter counts only while enabled (throughout the
    window: a node disabled in it may be the one lying); the sample is a share of every node
    enabled at some moment of the window, so invented or disabled hosts neither vote nor
    shrink what is needed."""
    counted = tuple(
        sorted(
            {
                r
                for r in reporters
                if r != accused and history.enabled_throughout(r, start_ns, end_ns)
            }
        )
    )
    others = [n for n in history.enabled_during(start_ns, end_ns) if n != accused]
    return Judgement(counted, len(others), reporters_needed(len(others), share))
