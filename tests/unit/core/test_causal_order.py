"""Causal order per topic (XIP-49 3.3.5): nothing is delivered before what it depends on."""

from __future__ import annotations

import pytest

from xnode.core.causal_order import CausalOrder, causally_order
from xnode.core.client_checks import CheckedEnvelope, MissingDependency
from xnode.core.cursors import Cursor

A = b"\x03" + bytes(16)
B = b"\x03" + bytes([1]) * 16


def env(
    origin: int, seq: int, depends: dict[int, int] | None = None, topic: bytes = A, ns: int = 0
) -> CheckedEnvelope:
    return CheckedEnvelope(origin, seq, ns or seq, topic, Cursor(depends or {}), False, b"")


def ids(envs: list[CheckedEnvelope]) -> list[tuple[int, int]]:
    return [(e.originator_node_id, e.sequence_id) for e in envs]


def test_an_answer_waits_for_the_message_it_answers() -> None:
    order = CausalOrder()
    # Node 200's reply (depends on 100:4) reaches the client before 100:4 itself.
    assert order.offer(env(200, 7, {100: 4}, ns=1)) == []
    assert order.held_back() == 1
    assert ids(order.offer(env(100, 4, ns=2))) == [(100, 4), (200, 7)]
    assert order.held_back() == 0


def test_topics_are_ordered_independently() -> None:
    order = CausalOrder()
    assert order.offer(env(200, 7, {100: 4}, topic=A)) == []
    assert ids(order.offer(env(100, 5, topic=B))) == [(100, 5)]


def test_what_came_before_the_start_cursor_counts_as_seen() -> None:
    order = CausalOrder(Cursor({100: 4}))
    assert ids(order.offer(env(200, 7, {100: 4}))) == [(200, 7)]


def test_a_batch_is_sorted_causally_and_a_missing_dependency_is_reported_or_skipped() -> None:
    batch = [env(300, 2, {200: 7}, ns=1), env(200, 7, {100: 4}, ns=2), env(100, 4, ns=3)]
    assert ids(causally_order(batch)) == [(100, 4), (200, 7), (300, 2)]
    lacking = [env(200, 7, {100: 4}, ns=2), env(300, 1, ns=5)]
    with pytest.raises(MissingDependency, match="depends on 100:4"):
        causally_order(lacking, strict=True)
    assert ids(causally_order(lacking)) == [(300, 1), (200, 7)]
