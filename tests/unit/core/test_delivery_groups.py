"""Delivery groups are f+1 peers, the same on every node, stable when others come and go."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from xnode.core.delivery_groups import delivery_group, epoch_of, fault_tolerance


def test_fault_tolerance_keeps_n_at_least_3f_plus_1() -> None:
    assert [fault_tolerance(n) for n in (1, 3, 4, 6, 7, 10)] == [0, 0, 1, 1, 2, 3]
    for n in range(1, 100):
        f = fault_tolerance(n)
        assert n >= 3 * f + 1 and n < 3 * (f + 1) + 1


def test_epochs_are_hours() -> None:
    assert epoch_of(3599.9) == 0 and epoch_of(3600) == 1


@given(
    st.integers(100, 10_000),
    st.integers(0, 10**6),
    st.sets(st.integers(100, 200), min_size=1, max_size=30),
)
def test_group_is_deterministic_and_sized(originator: int, epoch: int, peers: set[int]) -> None:
    n = len(peers) + 1
    group = delivery_group(originator, epoch, sorted(peers), n)
    assert group == delivery_group(originator, epoch, sorted(peers, reverse=True), n)
    assert len(group) == min(fault_tolerance(n) + 1, len(peers - {originator}))
    assert originator not in group and set(group) <= peers


def test_a_leaving_peer_moves_only_its_own_slot() -> None:
    peers = list(range(101, 131))
    group = delivery_group(100, 7, peers, 31)
    assert len(group) == 11
    gone = group[0]
    after = delivery_group(100, 7, [p for p in peers if p != gone], 31)
    assert after[:10] == group[1:]


def test_groups_differ_by_originator_and_epoch() -> None:
    peers = list(range(101, 131))
    groups = {tuple(delivery_group(o, e, peers, 31)) for o in (200, 201) for e in (1, 2)}
    assert len(groups) == 4


def test_at_least_widens_small_groups() -> None:
    peers = list(range(101, 106))
    assert len(delivery_group(100, 1, peers, 6)) == 2
    assert len(delivery_group(100, 1, peers, 6, at_least=5)) == 5
    assert len(delivery_group(100, 1, peers, 6, at_least=9)) == 5
