"""Which originator a payload goes to: XIP-49 3.3.6's preferred node per topic.

Every payer that follows it sends a topic's payloads to the same node, so readers of that
node see them in one total order. A node that is down is excluded and the choice is made
again among the rest, which is still deterministic for everyone who sees the same outage."""

from __future__ import annotations

import zlib
from collections.abc import Collection

from xnode.core.registry import NodeEntry, Registry


def available_nodes(registry: Registry) -> list[NodeEntry]:
    """Enabled nodes that publish an address, by id (a node without one cannot be reached)."""
    return sorted(
        (n for n in registry.nodes.values() if n.enabled and n.http_address.split("://")[-1]),
        key=lambda n: n.node_id,
    )


def preferred_node(topic: bytes, nodes: list[NodeEntry], excluded: Collection[int]) -> int | None:
    candidates = [n for n in nodes if n.node_id not in excluded]
    if not candidates:
        return None
    return candidates[zlib.crc32(topic) % len(candidates)].node_id


def failover_order(topic: bytes, nodes: list[NodeEntry]) -> list[int]:
    """Every candidate node for `topic`, preferred first, each next one the preferred node
    once those before it are excluded."""
    order: list[int] = []
    while (node_id := preferred_node(topic, nodes, order)) is not None:
        order.append(node_id)
    return order
