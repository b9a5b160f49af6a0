"""The NodeRegistry's history and the council's judgement of judged reports against it
(xnode.core.registry_history), with generated adversaries: byzantine reporters (a minority of
the enabled nodes), disabled and invented hosts, never flag an honest node."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from xnode.core.crypto import SigningKey
from xnode.core.registry_history import (
    DEFAULT_JUDGED_SHARE,
    NodeHistory,
    RegistryEvent,
    RegistryHistory,
    judge_window,
    replay,
    reporters_needed,
)

HOUR_S = 3600
T_S = 1_800_000_000
START, END = T_S * 10**9, (T_S + HOUR_S) * 10**9
KEYS = [SigningKey(bytes([n + 1]) * 32).public_key for n in range(40)]


def history(
    enabled: dict[int, bool], changes: dict[int, list[tuple[int, bool]]]
) -> RegistryHistory:
    """Nodes (100, 200, ...) added a day before the window; each with its changes."""
    nodes = {}
    for i, node in enumerate(sorted(enabled)):
        status = [(T_S - 86_400 + 1, enabled[node]), *changes.get(node, [])]
        nodes[node] = NodeHistory(node, KEYS[i], T_S - 86_400, tuple(status))
    return RegistryHistory(nodes)


def test_a_node_is_enabled_from_its_addition_until_its_status_says_otherwise() -> None:
    node = NodeHistory(100, KEYS[0], T_S, ((T_S + 10, False), (T_S + 20, True)))
    at = [node.enabled_at(t * 10**9) for t in (T_S - 1, T_S, T_S + 10, T_S + 19, T_S + 20)]
    assert at == [False, True, False, False, True]
    assert not node.enabled_throughout(T_S * 10**9, (T_S + 15) * 10**9)
    assert node.enabled_during((T_S + 12) * 10**9, (T_S + 30) * 10**9)
    assert not node.enabled_during((T_S + 12) * 10**9, (T_S + 15) * 10**9)


def test_replay_takes_the_key_of_the_first_addition_and_ignores_unknown_nodes() -> None:
    events = [
        RegistryEvent(T_S, 100, public_key=KEYS[0]),
        RegistryEvent(T_S + 1, 300, enabled=True),  # never added: not invented into a node
        RegistryEvent(T_S + 2, 100, enabled=False),
        RegistryEvent(T_S + 3, 100, public_key=KEYS[1]),  # impossible on the contract
    ]
    nodes = replay(events)
    assert list(nodes) == [100]
    assert nodes[100].public_key == KEYS[0]
    assert nodes[100].status_changes == ((T_S + 2, False),)


def test_a_snapshot_reads_back_as_written() -> None:
    written = history({100: True, 200: False}, {200: [(T_S + 5, True)]})
    read = RegistryHistory.from_json(written.to_json())
    assert read == written


@given(st.integers(min_value=0, max_value=10_000))
def test_more_than_a_third_and_at_least_two(others: int) -> None:
    needed = reporters_needed(others)
    assert needed >= 2
    assert Fraction(needed) > DEFAULT_JUDGED_SHARE * others
    assert needed == 2 or Fraction(needed - 1) <= DEFAULT_JUDGED_SHARE * others


@st.composite
def networks(draw: st.DrawFn) -> tuple[RegistryHistory, int, set[int], list[int]]:
    """A registry of 3-40 nodes, some disabled (before or during the window), an honest
    accused, a byzantine minority (under a third of the enabled nodes) and the reporters the
    adversary sends: every byzantine node, disabled nodes and invented hosts, repeated."""
    count = draw(st.integers(min_value=3, max_value=40))
    ids = [100 * (i + 1) for i in range(count)]
    enabled = {n: draw(st.booleans()) or n == ids[0] for n in ids}
    changes: dict[int, list[tuple[int, bool]]] = {}
    for n in ids:
        if enabled[n] and draw(st.integers(0, 5)) == 0:  # disabled during the window
            changes[n] = [(T_S + draw(st.integers(0, HOUR_S - 1)), False)]
    registry = history(enabled, changes)
    accused = draw(st.sampled_from(ids))
    live = [n for n in ids if n != accused and registry.enabled_throughout(n, START, END)]
    byzantine = set(draw(st.lists(st.sampled_from(live), max_size=len(live)))) if live else set()
    everyone = len(registry.enabled_during(START, END))
    while byzantine and 3 * len(byzantine) >= everyone:
        byzantine.pop()
    disabled = [n for n in ids if not registry.enabled_throughout(n, START, END)]
    invented = draw(st.lists(st.integers(1, 10**6).map(lambda x: 100 * x + 50), max_size=50))
    reporters = [*byzantine, *disabled, *invented, accused]
    reporters = draw(st.permutations(reporters + reporters))
    return registry, accused, byzantine, reporters


@settings(max_examples=200, deadline=None)
@given(networks())
def test_no_byzantine_minority_flags_an_honest_node(
    network: tuple[RegistryHistory, int, set[int], list[int]],
) -> None:
    """Under a third of the enabled nodes, however many reports they sign, with every
    disabled node and any number of invented hosts, do not flag an honest node."""
    registry, accused, byzantine, reporters = network
    verdict = judge_window(accused, reporters, START, END, registry)
    assert not verdict.flagged, (verdict, byzantine)
    assert set(verdict.counted) <= byzantine


@settings(max_examples=100, deadline=None)
@given(networks())
def test_every_enabled_node_reporting_flags_the_accused(
    network: tuple[RegistryHistory, int, set[int], list[int]],
) -> None:
    """The other side: a node that every other node enabled throughout the window reports
    is flagged once they are two or more and none was disabled in the window, or once more
    than a third of them report when some were."""
    registry, accused, _, _ = network
    others = [n for n in registry.nodes if registry.enabled_throughout(n, START, END)]
    others = [n for n in others if n != accused]
    verdict = judge_window(accused, others, START, END, registry)
    enabled_others = [n for n in registry.enabled_during(START, END) if n != accused]
    if len(others) >= 2 and len(others) == len(enabled_others):
        assert verdict.flagged, verdict
    assert verdict.flagged == (3 * len(others) > len(enabled_others) and len(others) >= 2)
