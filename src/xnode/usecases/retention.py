"""Retention without hands: on a schedule, the envelope table gets its partitions ahead and
loses the wholly expired ones (xnode.core.partitions), and a retention plan from the Spark
job, when one is configured, is applied to what expired in partitions still kept. Reads
already hide expired envelopes (xnode.store.envelopes), so this only frees their space."""

from __future__ import annotations

from typing import Protocol

import structlog

from xnode.core.clock import Clock
from xnode.core.partitions import Maintenance
from xnode.observability.metrics import ENVELOPE_PARTITIONS, RETENTION_RUNS
from xnode.usecases.concurrency import Repeating

log = structlog.get_logger(__name__)


class PartitionPort(Protocol):
    async def maintain(self, now: int, ahead_days: int, period_days: int) -> Maintenance: ...


class PlanPort(Protocol):
    async def apply_if_new(self) -> int | None:
        """Envelopes a plan not applied before deleted; None when there was none."""
        ...


class RetentionSchedule:
    def __init__(
        self,
        partitions: PartitionPort,
        clock: Clock,
        every_s: float,
        ahead_days: int,
        period_days: int,
        plan: PlanPort | None = None,
    ) -> None:
        self._partitions = partitions
        self._clock = clock
        self._every_s = every_s
        self._ahead_days = ahead_days
        self._period_days = period_days
        self._plan = plan
        self._repeating = Repeating(self.run_logged, every_s, "retention")

    async def run_once(self) -> Maintenance:
        done = await self._partitions.maintain(
            self._clock.now_s(), self._ahead_days, self._period_days
        )
        if done.skipped:
            RETENTION_RUNS.labels("skipped").inc()
            return done
        ENVELOPE_PARTITIONS.labels("added").inc(len(done.added))
        ENVELOPE_PARTITIONS.labels("dropped").inc(len(done.dropped))
        deleted = None if self._plan is None else await self._plan.apply_if_new()
        RETENTION_RUNS.labels("done").inc()
        if done.added or done.dropped or deleted:
            log.info(
                "retention_run",
                added=done.added,
                moved=done.moved,
                dropped=done.dropped,
                keys_released=done.keys_released,
                plan_deleted=deleted,
            )
        return done

    async def run_logged(self) -> None:
        """A run whose failure is counted and logged: the next run tries again."""
        try:
            await self.run_once()
        except Exception as exc:  # the database may be down or locked meanwhile
            RETENTION_RUNS.labels("failed").inc()
            log.warning("retention_run_failed", error=repr(exc)[:300])

    def start(self) -> None:
        self._repeating.start()

    async def stop(self) -> None:
        await self._repeating.stop()
