"""XIP-49 3.3.6 preferred node: deterministic per topic, spread over enabled nodes, and the
failover order is the preferred node with the earlier ones excluded."""

from __future__ import annotations

import zlib
from collections import Counter

from xnode.core.crypto import SigningKey
from xnode.core.originator_selection import available_nodes, failover_order, preferred_node
from xnode.core.registry import NodeEntry, Registry

KEYS = {n: SigningKey.generate().public_key for n in (100, 200, 300, 400)}


def registry(disabled: tuple[int, ...] = (), no_address: tuple[int, ...] = ()) -> Registry:
    return Registry(
        NodeEntry(
            n,
            key,
            "http://" if n in no_address else f"http://127.0.0.1:{5000 + n}",
            n not in disabled,
        )
        for n, key in KEYS.items()
    )


def test_preferred_node_is_the_xip_formula_over_nodes_sorted_by_id() -> None:
    nodes = available_nodes(registry())
    for topic in (b"\x00" + bytes(16), b"\x02" + bytes(range(32)), b"\x01abc"):
        expected = [100, 200, 300, 400][zlib.crc32(topic) % 4]
        assert preferred_node(topic, nodes, ()) == expected


def test_disabled_and_addressless_nodes_are_never_chosen() -> None:
    nodes = available_nodes(registry(disabled=(200,), no_address=(400,)))
    assert [n.node_id for n in nodes] == [100, 300]
    for i in range(50):
        assert preferred_node(b"\x00" + bytes([i]) * 16, nodes, ()) in (100, 300)


def test_failover_order_excludes_one_node_at_a_time() -> None:
    nodes = available_nodes(registry())
    topic = b"\x00" + bytes(range(16))
    order = failover_order(topic, nodes)
    assert sorted(order) == [100, 200, 300, 400]
    for i, node_id in enumerate(order):
        assert preferred_node(topic, nodes, order[:i]) == node_id


def test_topics_spread_over_all_nodes() -> None:
    nodes = available_nodes(registry())
    counts = Counter(
        preferred_node(b"\x00" + i.to_bytes(16, "big"), nodes, ()) for i in range(4000)
    )
    assert set(counts) == {100, 200, 300, 400}
    assert min(counts.values()) > 800  # about a quarter each


def test_no_nodes_no_choice() -> None:
    assert preferred_node(b"\x00" + bytes(16), [], ()) is None
    assert failover_order(b"\x00" + bytes(16), []) == []
