"""The scrub: in the background, every stored envelope is checked again against the leaf its
log holds for it (xnode.core.leaves), at a bounded rate (`scrub_envelopes_per_second`), a
page at a time in (originator, sequence id) order, round and round.

Peers compare leaves, not envelopes, so bytes changed on disk (a fault, tampering) would be
served to clients and peers for ever, with every fingerprint agreeing. An envelope its leaf
does not commit to, or whose originator signature does not recover to the originator's
registry key (the leaf commits to the signed content, not to the signature), is withdrawn
at once (deleted, its bytes logged in `scrub_mismatch`), so it is never served in its bad
form; its leaf stays, which makes it a loss like one whose row is missing, and both are
handed to repair (replication.losses), which fetches the envelope the leaf commits to
from any peer that holds it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from xnode.core.leaves import Held, HeldLeaf
from xnode.observability.metrics import SCRUB_ENVELOPES, SCRUB_PASSES
from xnode.observability.outage import DatabaseOutage
from xnode.usecases.concurrency import end_if_cancelled
from xnode.usecases.ports import StoreUnavailable

log = structlog.get_logger(__name__)

MAX_PAGE = 1000  # leaves read per query
START = (0, 0)  # before every (originator, sequence id)


class ScrubSource(Protocol):
    async def page(self, after: tuple[int, int], limit: int) -> list[HeldLeaf]: ...

    async def withdraw(self, row: HeldLeaf) -> bool: ...


# (originator, sequence ids) -> repair fetches them (replication.losses.LossFinder.add)
OnLost = Callable[[int, list[int]], None]


@dataclass
class PassCount:
    """What one pass (or part of one) found, by what is held for each leaf."""

    held: dict[Held, int] = field(default_factory=lambda: dict.fromkeys(Held, 0))
    withdrawn: int = 0

    @property
    def checked(self) -> int:
        return sum(self.held.values())


class Scrub:
    def __init__(
        self,
        source: ScrubSource,
        per_second: float,
        on_lost: OnLost | None = None,
        now_unix: Callable[[], int] = lambda: int(time.time()),
        keys: Callable[[], Mapping[int, bytes]] = dict,
    ) -> None:
        """`per_second`: leaves checked per second at most (0 or less: no limit). `keys`:
        the originators' registry keys, which their envelopes' signatures must recover to
        (an originator not in it: the signature is not checked)."""
        self._source = source
        self._keys = keys
        self._per_second = per_second
        self._on_lost = on_lost
        self._now_unix = now_unix
        self._after = START
        self._count = PassCount()
        self._started = time.monotonic()
        self._task: asyncio.Task[None] | None = None
        self.passes = 0
        self.checked = 0  # leaves, since it was made

    def _page_size(self) -> int:
        if self._per_second <= 0:
            return MAX_PAGE
        return max(1, min(MAX_PAGE, int(self._per_second)))

    async def step(self) -> bool:
        """Checks the next page; True when it ended a pass (and the next starts over)."""
        rows = await self._source.page(self._after, self._page_size())
        now, keys = self._now_unix(), self._keys()
        lost: dict[int, list[int]] = {}
        for row in rows:
            held = row.judge(now, keys.get(row.originator_node_id))
            if held is Held.LOST or (held is Held.MISMATCH and await self._withdraw(row)):
                lost.setdefault(row.originator_node_id, []).append(row.sequence_id)
            self._count.held[held] += 1
            SCRUB_ENVELOPES.labels(held.value).inc()
        self.checked += len(rows)
        if self._on_lost is not None:
            for originator, ids in lost.items():
                self._on_lost(originator, ids)
        if rows:
            last = rows[-1]
            self._after = (last.originator_node_id, last.sequence_id)
        if len(rows) < self._page_size():
            self._finish_pass()
            return True
        return False

    async def _withdraw(self, row: HeldLeaf) -> bool:
        withdrawn = await self._source.withdraw(row)
        if withdrawn:
            self._count.withdrawn += 1
            log.error(
                "scrub_mismatch",
                originator=row.originator_node_id,
                sequence_id=row.sequence_id,
                leaf="0x" + row.leaf.hex(),
                withdrawn="0x" + (row.raw or b"").hex(),
            )
        return withdrawn

    def _finish_pass(self) -> PassCount:
        done, self._count = self._count, PassCount()
        self._after = START
        self.passes += 1
        SCRUB_PASSES.inc()
        log.info(
            "scrub_pass_done",
            seconds=round(time.monotonic() - self._started, 1),
            withdrawn=done.withdrawn,
            **{held.value: n for held, n in done.held.items()},
        )
        self._started = time.monotonic()
        return done

    async def one_pass(self) -> PassCount:
        """A whole pass from the start, as fast as the rate allows (`xnode audit --repair`)."""
        self._after, self._count = START, PassCount()
        while True:
            count = self._count
            if await self.step():
                return count

    async def _run(self, outage: DatabaseOutage) -> None:
        while True:
            started = time.monotonic()
            try:
                ended = await self.step()
                checked = self._page_size()
            except Exception as exc:  # try again later
                if isinstance(exc, StoreUnavailable):  # down for a while, maybe
                    outage.failed("scrub", exc)
                else:
                    log.warning("scrub_failed", error=repr(exc)[:300])
                ended, checked = False, self._page_size()
            end_if_cancelled()
            pause = checked / self._per_second - (time.monotonic() - started)
            await asyncio.sleep(max(pause, 1.0 if ended else 0.0))

    def start(self, outage: DatabaseOutage) -> None:
        """Scrubs at the rate until `stop`, telling `outage` when the store fails (a pass
        run by hand, `one_pass`, raises instead)."""
        if self._per_second > 0:
            self._task = asyncio.create_task(self._run(outage), name="scrub")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
