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
from any peer that holds it.

Never the node's own envelopes for their signature: when the registry holds another key
for this node than the one it signs with (a key changed on one side only), every envelope
it ever signed would fail the check and be withdrawn, its whole log lost at once, and no
peer could serve it back under the registry's key. So the scrub refuses to start while the
two keys differ (`ScrubRefused`, naming both), and an envelope of its own whose leaf
matches but whose signature does not recover to the registry's key (the registry changed
while it ran) is logged (`scrub_own_signature_mismatch`) and counted
(`xnode_scrub_leaves_total{outcome="own_signature_mismatch"}`), never withdrawn."""

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


OWN_SIGNATURE_MISMATCH = "own_signature_mismatch"  # the metric's outcome label


class ScrubRefused(Exception):
    """The scrub would withdraw this node's own envelopes: its signer key is not the one the
    registry holds for it."""


@dataclass(frozen=True, slots=True)
class OwnKey:
    """This node's id and the public key it signs with."""

    node_id: int
    public_key: bytes


def _hex(key: bytes) -> str:
    return "0x" + key.hex()


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
    own_signature_mismatches: int = 0  # this node's own envelopes, kept (see above)

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
        own: OwnKey | None = None,
    ) -> None:
        """`per_second`: leaves checked per second at most (0 or less: no limit). `keys`:
        the originators' registry keys, which their envelopes' signatures must recover to
        (an originator not in it: the signature is not checked). `own`: this node's id and
        signer key (None: a read-only node, no log of its own)."""
        self._source = source
        self._keys = keys
        self._own = own
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
            held = self._judge(row, now, keys)
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

    def check_own_key(self) -> None:
        """Raises ScrubRefused when the registry holds another key for this node than the
        one it signs with."""
        if self._own is None:
            return
        registered = self._keys().get(self._own.node_id)
        if registered is not None and registered != self._own.public_key:
            raise ScrubRefused(
                f"the scrub will not run: node {self._own.node_id} signs with public key "
                f"{_hex(self._own.public_key)} but the registry holds "
                f"{_hex(registered)} for it, so every envelope of its own log would fail "
                "the signature check and be withdrawn; configure the registered signer key "
                "(or correct the registry) first"
            )

    def _judge(self, row: HeldLeaf, now: int, keys: Mapping[int, bytes]) -> Held:
        key = keys.get(row.originator_node_id)
        if self._own is None or row.originator_node_id != self._own.node_id or key is None:
            return row.judge(now, key)
        held = row.judge(now)  # its own: the leaf alone decides a withdrawal
        if held is Held.MATCHES and not row.signed_by(key):
            self._own_signature_mismatch(row, key)
        return held

    def _own_signature_mismatch(self, row: HeldLeaf, key: bytes) -> None:
        self._count.own_signature_mismatches += 1
        SCRUB_ENVELOPES.labels(OWN_SIGNATURE_MISMATCH).inc()
        if self._count.own_signature_mismatches == 1:  # once a pass: it may be every row
            log.error(
                "scrub_own_signature_mismatch",
                node_id=row.originator_node_id,
                sequence_id=row.sequence_id,
                registry_key=_hex(key),
                signer_key=_hex(self._own.public_key) if self._own else None,
                kept=True,
                hint="this node's own envelope does not recover to its registry key: kept, "
                "never withdrawn; check the signer key against the registry",
            )

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
            own_signature_mismatches=done.own_signature_mismatches,
            **{held.value: n for held, n in done.held.items()},
        )
        self._started = time.monotonic()
        return done

    async def one_pass(self) -> PassCount:
        """A whole pass from the start, as fast as the rate allows (`xnode audit --repair`);
        raises ScrubRefused as `start` does."""
        self.check_own_key()
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
        run by hand, `one_pass`, raises instead); raises ScrubRefused when this node's
        signer key is not its registry key."""
        self.check_own_key()
        if self._per_second > 0:
            self._task = asyncio.create_task(self._run(outage), name="scrub")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
