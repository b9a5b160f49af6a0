"""`xnode prune --plan`: checks the whole plan, then applies it batch by batch."""

from __future__ import annotations

import time
from pathlib import Path

import asyncpg
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from xnode.commands.database import DATABASE_ERRORS, connection
from xnode.config import Settings
from xnode.core.prune_plan import Plan, PlanError, batch_count, check_as_of, load_plan
from xnode.store.prune import PLAN_BATCH_SIZE, PruneResult, prune

DEFAULT_BATCH_SIZE = PLAN_BATCH_SIZE


class PruneError(RuntimeError):
    """The plan was not applied (or not completely); the message says why."""


async def apply_plan(
    settings: Settings,
    plan_path: Path,
    batch_size: int = DEFAULT_BATCH_SIZE,
    dry_run: bool = False,
    show_progress: bool = True,
    now_unix: int | None = None,
) -> tuple[Plan, PruneResult]:
    """`now_unix`: the node's clock (None: read it), which the plan's as_of may not pass."""
    if batch_size < 1:
        raise PruneError(f"--batch-size must be at least 1, got {batch_size}")
    try:
        plan = load_plan(plan_path)  # all of it, before the first delete
        now = int(time.time()) if now_unix is None else now_unix
        check_as_of(plan, now)
    except PlanError as exc:
        raise PruneError(f"refusing the plan, nothing deleted: {exc}") from None
    async with connection(settings.database_dsn, PruneError) as conn:
        pruned = await _prune_with_progress(conn, plan, batch_size, dry_run, show_progress, now)
        return plan, pruned


async def _prune_with_progress(
    conn: asyncpg.Connection, plan: Plan, batch_size: int, dry_run: bool, show: bool, now: int
) -> PruneResult:
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        disable=not show,
    )
    done = 0

    def advance() -> None:
        nonlocal done
        done += 1
        progress.advance(task)

    with progress:
        task = progress.add_task(
            "checking batches" if dry_run else "pruning batches",
            total=batch_count(plan.ranges, batch_size),
        )
        try:
            return await prune(conn, plan, batch_size, dry_run, advance, now)
        except DATABASE_ERRORS as exc:
            raise PruneError(
                f"stopped after {done} committed batches: {exc}; applying the plan again is safe"
            ) from None


def describe(plan: Plan, result: PruneResult, dry_run: bool) -> str:
    verb = "would delete" if dry_run else "deleted"
    lines = []
    for node_id, counts in result.items():
        line = f"originator {node_id}: {verb} {counts.deleted}"
        if counts.kept_identity_updates:
            line += f", kept {counts.kept_identity_updates} identity updates"
        if counts.kept_unexpired:
            line += f", kept {counts.kept_unexpired} not expired at {plan.as_of_unixtime}"
        lines.append(line)
    total = sum(c.deleted for c in result.values())
    lines.append(
        f"total: {verb} {total} envelopes in {len(plan.ranges)} ranges "
        f"(the plan names {plan.envelope_count}; the vector clock is unchanged)"
    )
    return "\n".join(lines)
