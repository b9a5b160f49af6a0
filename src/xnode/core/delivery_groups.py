"""Delivery groups (after Safe Network's reliable message delivery): the log of an
originator that cannot be reached (or is disabled) is fetched through f+1 peers, where f is
the most faulty nodes a registry of n tolerates (n >= 3f + 1). With f+1 relays, f faulty ones
(serving forged, truncated or stale logs) cannot keep an envelope from an honest node: at
least one relay is honest, and whatever the faulty ones serve is checked anyway.

The group is chosen by rendezvous hashing of (originator, epoch, peer): every node computes
the same ranking without talking to the others, a peer that leaves moves only its own slot,
and the group turns over each epoch (an hour by default) so no peer relays one originator
for ever."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

EPOCH_SECONDS = 3600


def fault_tolerance(registry_size: int) -> int:
    """The largest f with registry_size >= 3f + 1 (0 for fewer than 4 nodes)."""
    return max(0, (registry_size - 1) // 3)


def epoch_of(now_s: float, epoch_s: int = EPOCH_SECONDS) -> int:
    return int(now_s // epoch_s)


def _rank(originator: int, epoch: int, peer: int) -> bytes:
    data = b"delivery-group|" + b"|".join(str(v).encode() for v in (originator, epoch, peer))
    return hashlib.sha256(data).digest()


def delivery_group(
    originator: int,
    epoch: int,
    candidates: Iterable[int],
    registry_size: int,
    at_least: int = 1,
) -> list[int]:
    """The relays of `originator`'s log in `epoch`, best first, among `candidates` (the peers
    able to relay now: enabled, answering, not the originator): f+1 of them, or `at_least`
    when that is more. Fewer when fewer are able."""
    size = max(fault_tolerance(registry_size) + 1, at_least)
    ranked = sorted(
        (p for p in set(candidates) if p != originator),
        key=lambda p: _rank(originator, epoch, p),
    )
    return ranked[:size]
