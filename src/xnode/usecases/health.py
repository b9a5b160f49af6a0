"""Serving status follows the node's dependencies: a service is NOT_SERVING while one it
depends on is down (the database unreachable; for publishing, the chain indexer stopped or
trailing the head by more than chain_max_lag_blocks), and every service is NOT_SERVING while
the node drains. The database probe's answers also tell the node's DatabaseOutage when an
outage began (if nothing else met it first) and when it is over."""

from __future__ import annotations

from collections.abc import Mapping

import structlog

from xnode.observability.outage import DatabaseOutage
from xnode.usecases.concurrency import Repeating
from xnode.usecases.ports import ChainStatus, DatabaseProbe, HealthBoard

log = structlog.get_logger(__name__)

DATABASE = "database"
CHAIN = "chain"
PROBE_INTERVAL_S = 1.0


class HealthMonitor:
    def __init__(
        self,
        board: HealthBoard,
        depends_on: Mapping[str, frozenset[str]],
        database: DatabaseProbe,
        outage: DatabaseOutage,
        chain: ChainStatus | None = None,
        interval_s: float = PROBE_INTERVAL_S,
    ) -> None:
        """`depends_on` maps each health service name to the dependencies (DATABASE, CHAIN)
        it needs."""
        self._board = board
        self._depends_on = depends_on
        self._database = database
        self._outage = outage
        self._chain = chain
        self._down: dict[str, str] = {}  # dependency -> why it is down
        self._repeating = Repeating(self.check, interval_s, "health-monitor")

    @property
    def down(self) -> Mapping[str, str]:
        return dict(self._down)

    async def start(self) -> None:
        """Publishes the status once before returning, then every `interval_s`."""
        await self.check()
        self._repeating.start()

    async def stop(self) -> None:
        await self._repeating.stop()

    async def drain(self) -> None:
        """The node is shutting down: nothing serves any more."""
        await self.stop()
        for service in self._depends_on:
            self._board.set_serving(service, False)

    async def check(self) -> None:
        down: dict[str, str] = {}
        if await self._database.reachable():
            self._outage.answered()
        else:
            down[DATABASE] = "the database does not answer"
            self._outage.failed("health_probe", self._database.error or down[DATABASE])
        if self._chain is not None and (reason := self._chain.unhealthy_reason()) is not None:
            down[CHAIN] = reason
        self._log_changes(down)
        self._down = down
        for service, needs in self._depends_on.items():
            self._board.set_serving(service, not needs & down.keys())

    def _log_changes(self, down: dict[str, str]) -> None:
        """The chain's changes; the database's are the outage's to log."""
        for dependency, reason in down.items():
            if dependency not in self._down and dependency != DATABASE:
                log.warning("dependency_down", dependency=dependency, reason=reason)
        for dependency in self._down.keys() - down.keys() - {DATABASE}:
            log.info("dependency_up", dependency=dependency)
