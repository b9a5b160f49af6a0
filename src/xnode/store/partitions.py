"""The envelope table's partitions (xnode.core.partitions): periods added ahead, wholly expired
ones dropped with their keys. Each step is one transaction under an advisory lock, so worker
processes and nodes sharing the database take turns, and one that finds the lock taken skips
(another is doing the same work). DDL on a partition locks the whole table: `lock_timeout`
bounds how long publishes and queries can queue behind it; a step that times out is tried
again at the next run."""

from __future__ import annotations

import asyncpg

from xnode.core.partitions import (
    EXPIRED,
    LATER,
    NEVER,
    TABLE,
    Layout,
    Maintenance,
    Partition,
    layout,
    parse_bound,
    period_name,
    periods_to_add,
    periods_to_drop,
)
from xnode.store.connection import PgConnection
from xnode.store.errors import driver_errors_translated

PARTITIONS_LOCK_KEY = 0x786E6F6465_09
LOCK_TIMEOUT = "2s"

_BOUNDS = f"""
SELECT c.relname, pg_get_expr(c.relpartbound, c.oid)
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = '{TABLE}'::regclass
"""


def by_key(columns: str, keys: str) -> str:
    """The `columns` of the envelopes whose (originator, sequence id) meet `keys` (a condition
    on those two columns). Each is read from the one partition its key's expiry names (the
    join is pruned at run time), not looked for in every partition; what never expires (NULL
    expiry) is read from its own partition. OFFSET 0 keeps the planner from flattening the
    LATERAL into a join of every partition: it runs once per key, on the pruned partition."""
    return f"""
SELECT e.* FROM (
    SELECT originator_node_id, originator_sequence_id, expiry_unixtime FROM envelope_keys
    WHERE {keys} AND expiry_unixtime IS NOT NULL
) AS k
CROSS JOIN LATERAL (
    SELECT {columns} FROM {TABLE} AS x
    WHERE x.originator_node_id = k.originator_node_id
      AND x.originator_sequence_id = k.originator_sequence_id
      AND x.expiry_unixtime = k.expiry_unixtime
    OFFSET 0
) AS e
UNION ALL
SELECT {columns} FROM {NEVER} WHERE {keys}
"""


async def read_layout(conn: PgConnection | asyncpg.Pool) -> Layout:
    rows = await conn.fetch(_BOUNDS)
    ranges = [parse_bound(r[0], r[1]) for r in rows]
    return layout([p for p in ranges if p is not None])


async def _locked(conn: PgConnection) -> bool:
    if not await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", PARTITIONS_LOCK_KEY):
        return False
    await conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
    return True


def _range(name: str, lower: str, upper: str) -> str:
    return f"{name} FOR VALUES FROM ({lower}) TO ({upper})"


async def _add(conn: PgConnection, new: list[tuple[int, int]]) -> int:
    """`later` is detached, the periods carved out of its range, its rows that fall in them
    moved (straight into the period, so the payer usage trigger on the table does not count
    them twice), and it is attached again past them."""
    await conn.execute(f"ALTER TABLE {TABLE} DETACH PARTITION {LATER}")
    moved = 0
    for lower, upper in new:
        name = period_name(lower)
        await conn.execute(
            f"CREATE TABLE {name} PARTITION OF {_range(TABLE, str(lower), str(upper))}"
        )
        done = await conn.execute(
            f"INSERT INTO {name} SELECT * FROM {LATER}"
            " WHERE expiry_unixtime >= $1 AND expiry_unixtime < $2",
            lower,
            upper,
        )
        moved += int(done.split()[-1])
    horizon = new[-1][1]
    await conn.execute(f"DELETE FROM {LATER} WHERE expiry_unixtime < $1", horizon)
    await conn.execute(
        f"ALTER TABLE {TABLE} ATTACH PARTITION {_range(LATER, str(horizon), 'MAXVALUE')}"
    )
    return moved


async def _drop(conn: PgConnection, dropped: list[Partition]) -> int:
    """`expired` and the expired periods go; a new empty `expired` takes their range, for
    envelopes that arrive already expired. Their keys go by expiry (a dropped table fires
    no delete trigger)."""
    first_kept = dropped[-1].upper
    names = ", ".join([EXPIRED, *(p.name for p in dropped)])
    await conn.execute(f"DROP TABLE {names}")
    await conn.execute(
        f"CREATE TABLE {EXPIRED} PARTITION OF {_range(TABLE, 'MINVALUE', str(first_kept))}"
    )
    done = await conn.execute("DELETE FROM envelope_keys WHERE expiry_unixtime < $1", first_kept)
    return int(done.split()[-1])


@driver_errors_translated
class EnvelopePartitions:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def maintain(self, now: int, ahead_days: int, period_days: int) -> Maintenance:
        """Adds periods up to `ahead_days` past `now`, then drops what expired by `now`."""
        result = Maintenance()
        async with self._pool.acquire() as conn:
            async with conn.transaction():
                if not await _locked(conn):
                    return Maintenance(skipped=True)
                current = await read_layout(conn)
                new = periods_to_add(current, now, ahead_days, period_days)
                if new:
                    result.moved = await _add(conn, new)
                    result.added = [period_name(lower) for lower, _ in new]
            async with conn.transaction():
                if not await _locked(conn):
                    return result
                dropped = periods_to_drop(await read_layout(conn), now)
                if dropped:
                    result.keys_released = await _drop(conn, dropped)
                    result.dropped = [p.name for p in dropped]
        return result
