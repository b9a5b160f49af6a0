"""`xnode partitions`: one retention run by hand (what the node's schedule does,
xnode.usecases.retention), for a node run with `retention_seconds` 0 or to check at once."""

from __future__ import annotations

import time

import asyncpg

from xnode.commands.database import DATABASE_ERRORS
from xnode.config import Settings
from xnode.core.partitions import LayoutError, Maintenance
from xnode.store.partitions import EnvelopePartitions


class PartitionsError(RuntimeError):
    """Nothing (more) was changed; the message says why."""


async def maintain_once(settings: Settings, now: int | None = None) -> Maintenance:
    try:
        pool = await asyncpg.create_pool(settings.database_dsn, min_size=1, max_size=1)
    except DATABASE_ERRORS as exc:
        raise PartitionsError(f"cannot connect to the database: {exc}") from None
    try:
        return await EnvelopePartitions(pool).maintain(
            int(time.time()) if now is None else now,
            settings.retention_partitions_ahead_days,
            settings.retention_partition_days,
        )
    except (*DATABASE_ERRORS, LayoutError) as exc:
        raise PartitionsError(f"{exc}; running it again is safe") from None
    finally:
        await pool.close()


def describe(done: Maintenance) -> str:
    if done.skipped:
        return "another process holds the partitions lock (a node's run): nothing done"
    lines = [f"added {name}" for name in done.added]
    if done.moved:
        lines.append(f"moved {done.moved} envelopes of longer retention into them")
    lines += [f"dropped {name}" for name in done.dropped]
    if done.dropped:
        lines.append(f"released {done.keys_released} sequence ids of dropped envelopes")
    return "\n".join(lines) or "nothing to add or drop"
