"""When chain publishes are refused (XIP-49 3.2.6): before the first sync, while the RPC is
silent, and while the index is behind the head. Measured on an injected clock."""

from __future__ import annotations

from xnode.chain.index_status import IndexerConfig, IndexStatus, Tip
from xnode.chain.rpc import ChainUnavailable

CONFIG = IndexerConfig(confirmations=2, poll_s=0.5, max_lag_blocks=2, rpc_timeout_s=10.0)
STALE_AFTER_S = 2.0 + 10.0  # max(3 * poll_s, 2 s) + rpc_timeout_s


class SteppedClock:
    def __init__(self) -> None:
        self.mono = 1000.0

    def now_ns(self) -> int:
        return int(self.mono * 1e9)

    def now_s(self) -> int:
        return int(self.mono)

    def monotonic_s(self) -> float:
        return self.mono


def synced(clock: SteppedClock) -> IndexStatus:
    status = IndexStatus(CONFIG, clock)
    status.tip, status.head = Tip(100, b"h" * 32), 102  # head - confirmations == tip
    status.stepped()
    return status


def test_not_available_before_the_first_sync() -> None:
    status = IndexStatus(CONFIG, SteppedClock())
    assert status.unavailable_reason() == "the chain indexer has not synced with the chain yet"
    status.tip, status.head = Tip(100, b"h" * 32), 102
    assert status.unavailable_reason() is not None  # no step has succeeded yet


def test_available_until_the_rpc_has_been_silent_too_long() -> None:
    clock = SteppedClock()
    status = synced(clock)
    assert status.unavailable_reason() is None
    clock.mono += STALE_AFTER_S
    assert status.unavailable_reason() is None
    status.failed(ChainUnavailable("refused"))
    clock.mono += 1
    assert status.unavailable_reason() == "the chain RPC has not answered for 13 s"
    status.stepped()
    assert status.unavailable_reason() is None


def test_not_available_when_more_blocks_behind_than_allowed() -> None:
    status = synced(SteppedClock())
    status.head = 100 + CONFIG.confirmations + CONFIG.max_lag_blocks
    assert status.unavailable_reason() is None
    status.head += 1
    assert status.unavailable_reason() == "the chain indexer is 3 blocks behind the chain head"
