"""The deterministic fork rule: every node keeps the same envelope whatever the order."""

from __future__ import annotations

import itertools

from xnode.core.crypto import keccak256
from xnode.core.forks import envelope_hash, log_keeps, newcomer_wins

VERSIONS = [b"envelope a", b"envelope b", b"envelope c", b"envelope d"]


def test_the_lower_keccak_of_the_signed_bytes_stays() -> None:
    low, high = sorted(VERSIONS[:2], key=keccak256)
    assert envelope_hash(low) == keccak256(low)
    assert log_keeps(high, low) == low
    assert log_keeps(low, high) == low
    assert newcomer_wins(high, low)
    assert not newcomer_wins(low, high)
    assert not newcomer_wins(low, low)


def test_any_arrival_order_converges_on_one_envelope() -> None:
    expected = min(VERSIONS, key=keccak256)
    for order in itertools.permutations(VERSIONS):
        kept = order[0]
        for newcomer in order[1:]:
            if newcomer_wins(kept, newcomer):
                kept = newcomer
        assert kept == expected
