"""Where the chain index stands: the last indexed block (the tip), the chain head, and
whether the RPC answers. The publisher asks it whether chain publishes can be served now
(XIP-49 3.2.6) and waits on it for the block that holds its transaction."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import structlog

from xnode.chain.rpc import ChainRpcError, ChainUnavailable
from xnode.core.chain_payloads import NotVouched
from xnode.core.clock import SYSTEM_CLOCK, Clock

log = structlog.get_logger(__name__)

# While a publish waits for its event, the indexer polls this often.
FAST_POLL_S = 0.05


@dataclass(frozen=True, slots=True)
class IndexerConfig:
    confirmations: int = 0
    poll_s: float = 0.5
    page_blocks: int = 2000
    max_lag_blocks: int = 2
    rpc_timeout_s: float = 10.0
    reorg_window: int = 1024  # block hashes kept; a deeper re-org re-indexes from the start


@dataclass(frozen=True, slots=True)
class Tip:
    """The last indexed block."""

    number: int
    hash: bytes


class IndexStatus:
    def __init__(self, config: IndexerConfig, clock: Clock = SYSTEM_CLOCK) -> None:
        self.tip: Tip | None = None
        self.head: int | None = None
        self._config = config
        self._clock = clock
        self._last_ok: float | None = None
        self._failing_since: float | None = None
        self._progress = asyncio.Event()
        self._waiting = 0
        self._wake = asyncio.Event()

    @property
    def tip_number(self) -> int | None:
        return self.tip.number if self.tip else None

    @property
    def lag_blocks(self) -> int | None:
        """Blocks the chain head is ahead of the last indexed block."""
        if self.head is None or self.tip is None:
            return None
        return max(0, self.head - self.tip.number)

    def since_step_s(self) -> float | None:
        """Seconds since the last successful step (or observation): grows while stalled."""
        return None if self._last_ok is None else self._clock.monotonic_s() - self._last_ok

    def unavailable_reason(self) -> str | None:
        """Why chain publishes must wait (XIP-49 3.2.6), or None when the index is current."""
        if self._last_ok is None or self.head is None or self.tip is None:
            return "the chain indexer has not synced with the chain yet"
        age = self._clock.monotonic_s() - self._last_ok
        if age > max(3 * self._config.poll_s, 2.0) + self._config.rpc_timeout_s:
            return f"the chain RPC has not answered for {age:.0f} s"
        behind = self.head - self._config.confirmations - self.tip.number
        if behind > self._config.max_lag_blocks:
            return f"the chain indexer is {behind} blocks behind the chain head"
        return None

    @contextlib.contextmanager
    def awaited(self) -> Iterator[None]:
        """While a publish waits for its event, poll every FAST_POLL_S instead of poll_s: the
        publish is answered right after the block that holds it, not up to a poll later."""
        self._waiting += 1
        self._wake.set()
        try:
            yield
        finally:
            self._waiting -= 1

    async def wait_available(self, most_s: float) -> str | None:
        """Waits up to `most_s` for the index to be current; returns why it is not, if not."""
        deadline = self._clock.monotonic_s() + most_s
        while (reason := self.unavailable_reason()) is not None:
            left = deadline - self._clock.monotonic_s()
            if left <= 0:
                return reason
            await self.wait_progress(left)
        return None

    async def wait_progress(self, most_s: float) -> None:
        """Returns after the next indexing step (or poll), or after `most_s` seconds."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._progress.wait(), most_s)

    async def idle(self) -> None:
        """Waits a poll before the next step: a short one while a publish waits."""
        poll = self._config.poll_s
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                self._wake.wait(), min(poll, FAST_POLL_S) if self._waiting else poll
            )

    def stepped(self) -> None:
        """A step (or an observation) succeeded: the RPC answers; wake who waits for it."""
        self._last_ok = self._clock.monotonic_s()
        if self._failing_since is not None:
            down = self._last_ok - self._failing_since
            self._failing_since = None
            log.info("chain_indexer_recovered", down_s=round(down, 2), tip=self.tip_number)
        self._progress.set()
        self._progress = asyncio.Event()

    def failed(self, exc: Exception) -> None:
        if self._failing_since is not None:
            return  # logged when it started failing
        self._failing_since = self._clock.monotonic_s()
        transient = isinstance(exc, ChainUnavailable | ChainRpcError | OSError | NotVouched)
        (log.warning if transient else log.error)(
            "chain_indexer_failing",
            error=repr(exc),
            tip=self.tip_number,
            exc_info=not transient,
        )
