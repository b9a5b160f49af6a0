"""The deterministic fork rule: every node keeps the same envelope whatever the order."""

from __future__ import annotations

import itertools

from xnode.core.crypto import keccak256
from xnode.core.forks import ForkDigest, envelope_hash, fork_digest, log_keeps, newcomer_wins

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


def test_the_fork_digest_depends_on_the_kept_versions_only() -> None:
    kept = [(2, envelope_hash(VERSIONS[0])), (2, envelope_hash(VERSIONS[1])), (7, b"\x01" * 32)]
    digest = fork_digest(kept)
    assert digest.versions == 3 and len(digest.digest) == 32
    for order in itertools.permutations(kept):
        assert fork_digest(order) == digest
    assert fork_digest(kept[:2]) != digest
    assert fork_digest([(3, h) for _, h in kept]).digest != digest.digest  # ids count too
    assert fork_digest([]) == ForkDigest(0, b"")
