"""Applies a retention plan to the envelope store, one short transaction per batch.

Only rows inside the plan's ranges are touched, and among those only rows that are, by the
store's own columns, expired at the plan's `as_of` and not identity updates: a plan made from
another node's export, or a stale one, can only delete less, never more. A row that never
expires (expiry 0 in the envelope, NULL here: its leaf commits to "never") is never deleted,
and a plan whose `as_of` is ahead of this node's clock is refused (core.prune_plan.check_as_of).
Deleting again what is already gone deletes nothing, so applying a plan twice is harmless. The
vector clock is left alone: a pruned range stays "seen", so replication does not fetch it back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from xnode.core.prune_plan import Plan, PlanRange, batches, check_as_of, load_plan
from xnode.core.topics import TopicKind
from xnode.store.connection import PgConnection

_IDENTITY_KIND = bytes([TopicKind.IDENTITY_UPDATES])
PLAN_BATCH_SIZE = 5000  # ids per transaction, as `xnode prune` defaults

# One primary-key range scan per named range. asyncpg prepares statements, and the generic plan
# of a plain join (or a LATERAL the planner flattens into one) guesses the ranges are large and
# scans the whole table; OFFSET 0 keeps the subquery apart, so it runs per range on the index.
_IN_RANGES = """
FROM unnest($1::int[], $2::bigint[], $3::bigint[]) AS r(node_id, first_id, last_id)
CROSS JOIN LATERAL (
    SELECT tableoid, ctid, originator_node_id, topic, expiry_unixtime, originator_ns
    FROM originator_envelopes x
    WHERE x.originator_node_id = r.node_id
      AND x.originator_sequence_id BETWEEN r.first_id AND r.last_id
    OFFSET 0
) AS e
"""
# An envelope's topic starts with its kind byte. NULL (or 0) expiry is never: the leaf commits
# to the envelope's own expiry, and 0 there is "never" (spark_jobs.retention_expiry agrees).
_IDENTITY = "substring(e.topic FROM 1 FOR 1) = $4"
_EXPIRED = "coalesce(e.expiry_unixtime <> 0 AND e.expiry_unixtime <= $5, false)"

# Deleting by the row ids found above is a TID scan, whatever the planner thinks of the ranges.
# A row id is a place within one partition (migration 0009): the partition must match too.
_DELETE = f"""
WITH found AS MATERIALIZED (
    SELECT e.tableoid, e.ctid {_IN_RANGES} WHERE NOT {_IDENTITY} AND {_EXPIRED}
), deleted AS (
    DELETE FROM originator_envelopes x
    WHERE x.ctid = ANY(ARRAY(SELECT ctid FROM found))
      AND (x.tableoid, x.ctid) IN (SELECT tableoid, ctid FROM found)
    RETURNING originator_node_id
)
SELECT originator_node_id, count(*) FROM deleted GROUP BY 1
"""

# Rows a batch leaves (or, in a dry run, would delete and leave), by reason.
_CLASSIFY = f"""
SELECT e.originator_node_id,
       count(*) FILTER (WHERE NOT {_IDENTITY} AND {_EXPIRED}),
       count(*) FILTER (WHERE {_IDENTITY}),
       count(*) FILTER (WHERE NOT {_IDENTITY} AND NOT {_EXPIRED})
{_IN_RANGES}
GROUP BY 1
"""


@dataclass
class PruneCounts:
    deleted: int = 0  # or, in a dry run, would be deleted
    kept_identity_updates: int = 0
    kept_unexpired: int = 0


PruneResult = dict[int, PruneCounts]


def _arguments(batch: list[PlanRange], plan: Plan) -> list[object]:
    return [
        [r.originator_node_id for r in batch],
        [r.first_sequence_id for r in batch],
        [r.last_sequence_id for r in batch],
        _IDENTITY_KIND,
        plan.as_of_unixtime,
    ]


async def _apply_batch(
    conn: PgConnection, args: list[object], dry_run: bool, result: PruneResult
) -> None:
    async with conn.transaction():
        deleted = [] if dry_run else await conn.fetch(_DELETE, *args)
        left = await conn.fetch(_CLASSIFY, *args)
    for node_id, count in deleted:
        result[node_id].deleted += count
    for node_id, prunable, identity, unexpired in left:
        counts = result[node_id]
        counts.deleted += prunable if dry_run else 0
        counts.kept_identity_updates += identity
        counts.kept_unexpired += unexpired


async def prune(
    conn: PgConnection,
    plan: Plan,
    batch_size: int,
    dry_run: bool = False,
    on_batch: Callable[[], None] | None = None,
    now_unix: int | None = None,
) -> PruneResult:
    """Per originator: what was deleted and what the plan named but was kept. Raises
    PlanError, deleting nothing, when the plan's `as_of` is ahead of this node's clock
    (`now_unix`; None: read it)."""
    check_as_of(plan, int(time.time()) if now_unix is None else now_unix)
    result: PruneResult = {r.originator_node_id: PruneCounts() for r in plan.ranges}
    # Each batch is small; JIT compiling its plan (costed high for unknown arrays) took longer
    # than running it.
    await conn.execute("SET jit = off")
    for batch in batches(plan.ranges, batch_size):
        await _apply_batch(conn, _arguments(batch, plan), dry_run, result)
        if on_batch is not None:
            on_batch()
    return dict(sorted(result.items()))


class ScheduledPlan:
    """A retention plan file applied by the node's retention runs (xnode.usecases.retention)
    each time it changes: a plan is tried once per version of the file, so a refused one is
    reported once, not at every run."""

    def __init__(self, pool: asyncpg.Pool, path: Path, batch_size: int = PLAN_BATCH_SIZE):
        self._pool = pool
        self._path = path
        self._batch_size = batch_size
        self._applied: int | None = None  # the file's mtime_ns when last tried

    async def apply_if_new(self) -> int | None:
        try:
            changed = self._path.stat().st_mtime_ns
        except FileNotFoundError:
            return None
        if changed == self._applied:
            return None
        self._applied = changed
        plan = load_plan(self._path)
        async with self._pool.acquire() as conn:
            result = await prune(conn, plan, self._batch_size)
        return sum(c.deleted for c in result.values())
