"""The node's database lost and back, each logged once per outage.

While Postgres is unreachable (a failover, a restart) every request that needs it is answered
UNAVAILABLE and every loop that writes to it retries: logged one by one, each outage buried
what an operator needs (when it began, why, for how long) under an event per failure. So the
node's users of its database (the API's error mapping, the loops, the health probe) tell one
`DatabaseOutage` of their failures: the first logs `database_lost` (the error, the host, who
met it), the repeats go to debug, and once the health probe answers with nothing else failing
for `quiet_s`, `database_back` says how long it lasted and how many requests were refused
meanwhile."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import structlog

from xnode.core.clock import SYSTEM_CLOCK, Clock

log = structlog.get_logger(__name__)

# The health probe's interval: a straggler failing just after the probe answered (a pooled
# connection the outage left broken) keeps the outage open rather than starting another.
QUIET_S = 1.0


@dataclass
class _Lost:
    since_s: float
    last_failure_s: float
    failures: int = 0
    refused: int = 0


def _described(error: BaseException | str) -> str:
    if isinstance(error, str):
        return error
    cause = error.__cause__
    return repr(error) if cause is None else f"{error!r} (from {type(cause).__name__})"


class DatabaseOutage:
    """Whether the node's database is lost, as its users found it; one per node.

    `host` names the database host in use (no credentials), for the events."""

    def __init__(
        self, host: Callable[[], str], clock: Clock = SYSTEM_CLOCK, quiet_s: float = QUIET_S
    ) -> None:
        self._host = host
        self._clock = clock
        self._quiet_s = quiet_s
        self._lost: _Lost | None = None

    @property
    def lost(self) -> bool:
        return self._lost is not None

    def failed(self, by: str, error: BaseException | str, **context: object) -> None:
        """A use of the database by `by` (a method, a loop) failed with `error`: the first
        failure of an outage is logged `database_lost` (with `context`), a repeat at debug."""
        self._note(by, error, context)

    def refused(self, method: str, error: BaseException | str) -> None:
        """A request to `method` was answered UNAVAILABLE for `error`; as `failed`."""
        self._note(method, error, {}).refused += 1

    def _note(self, by: str, error: BaseException | str, context: dict[str, object]) -> _Lost:
        now = self._clock.monotonic_s()
        lost = self._lost
        described = _described(error)
        if lost is None:
            lost = self._lost = _Lost(now, now)
            log.error("database_lost", host=self._host(), by=by, error=described, **context)
        else:
            log.debug("database_still_lost", by=by, error=described, **context)
        lost.failures += 1
        lost.last_failure_s = now
        return lost

    def answered(self) -> None:
        """The database answered the health probe: a lost one is back once nothing else has
        failed for `quiet_s`."""
        lost = self._lost
        now = self._clock.monotonic_s()
        if lost is None or now - lost.last_failure_s < self._quiet_s:
            return
        self._lost = None
        log.info(
            "database_back",
            host=self._host(),
            down_s=round(now - lost.since_s, 3),
            refused=lost.refused,
            failures=lost.failures,
        )
