"""Envelope store queries (asyncpg). Every read hides expired envelopes."""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from xnode.core.clock import SYSTEM_CLOCK, Clock
from xnode.core.cursors import Cursor
from xnode.core.envelopes import StoredEnvelope
from xnode.core.query import EnvelopeQuery
from xnode.store.errors import driver_errors_translated
from xnode.store.partitions import by_key

_COLUMNS = "originator_node_id, originator_sequence_id, topic, envelope, expiry_unixtime"
_IN_RANGE = (
    "originator_node_id = $1 AND originator_sequence_id > $2 AND originator_sequence_id <= $3"
)

# One index range scan per (topic, known originator) past the cursor, merged in stable order.
_TOPIC_QUERY = f"""
SELECT e.{_COLUMNS.replace(", ", ", e.")}
FROM unnest($1::bytea[]) AS t(topic)
CROSS JOIN vector_clock AS o
LEFT JOIN unnest($2::int[], $3::bigint[]) AS c(node_id, sequence_id)
    ON c.node_id = o.originator_node_id
CROSS JOIN LATERAL (
    SELECT {_COLUMNS} FROM originator_envelopes x
    WHERE x.topic = t.topic
      AND x.originator_node_id = o.originator_node_id
      AND x.originator_sequence_id > COALESCE(c.sequence_id, 0)
      AND (x.expiry_unixtime IS NULL OR x.expiry_unixtime > $4)
    ORDER BY x.originator_sequence_id
    LIMIT $5
) AS e
ORDER BY e.originator_node_id, e.originator_sequence_id
LIMIT $5
"""

_ORIGINATOR_QUERY = f"""
SELECT e.{_COLUMNS.replace(", ", ", e.")}
FROM unnest($1::int[]) AS o(node_id)
LEFT JOIN unnest($2::int[], $3::bigint[]) AS c(node_id, sequence_id) ON c.node_id = o.node_id
CROSS JOIN LATERAL (
    SELECT {_COLUMNS} FROM originator_envelopes x
    WHERE x.originator_node_id = o.node_id
      AND x.originator_sequence_id > COALESCE(c.sequence_id, 0)
      AND (x.expiry_unixtime IS NULL OR x.expiry_unixtime > $4)
    ORDER BY x.originator_sequence_id
    LIMIT $5
) AS e
ORDER BY e.originator_node_id, e.originator_sequence_id
LIMIT $5
"""

_NEWEST_QUERY = """
SELECT t.i, e.envelope
FROM unnest($1::bytea[]) WITH ORDINALITY AS t(topic, i)
LEFT JOIN LATERAL (
    SELECT x.envelope FROM originator_envelopes x
    WHERE x.topic = t.topic AND (x.expiry_unixtime IS NULL OR x.expiry_unixtime > $2)
    ORDER BY x.originator_ns DESC, x.originator_node_id DESC, x.originator_sequence_id DESC
    LIMIT 1
) AS e ON true
ORDER BY t.i
"""


def _within_budget(sql: str, budget: str) -> str:
    """`sql`'s rows, in order, as long as their envelopes' bytes add up to at most `budget`
    (always the first), and after them whether rows were left out. octet_length reads a
    stored value's size without fetching it, so what is cut off is never read."""
    return f"""
SELECT r.*, r.total > count(*) OVER () AS cut FROM (
    SELECT q.*, count(*) OVER () AS total,
           row_number() OVER w AS n, sum(octet_length(q.envelope)) OVER w AS upto
    FROM ({sql}) AS q
    WINDOW w AS (ORDER BY q.originator_node_id, q.originator_sequence_id
                 ROWS UNBOUNDED PRECEDING)
) AS r
WHERE r.n = 1 OR r.upto <= {budget}
ORDER BY r.originator_node_id, r.originator_sequence_id
"""


_TOPIC_QUERY_WITHIN = _within_budget(_TOPIC_QUERY, "$6")
_ORIGINATOR_QUERY_WITHIN = _within_budget(_ORIGINATOR_QUERY, "$6")

# The newest envelope of each topic, in the request's order, until their bytes pass $3
# (always the first topic's).
_NEWEST_WITHIN = f"""
SELECT i, envelope FROM (
    SELECT n.i, n.envelope,
           sum(coalesce(octet_length(n.envelope), 0)) OVER (ORDER BY n.i) AS upto
    FROM ({_NEWEST_QUERY}) AS n
) AS r
WHERE r.i = 1 OR r.upto <= $3
ORDER BY r.i
"""


_ORIGINATOR_RANGE = f"""
SELECT * FROM ({by_key(_COLUMNS, _IN_RANGE)}) AS r ORDER BY originator_sequence_id
"""


def _cursor_arrays(cursor: Cursor) -> tuple[list[int], list[int]]:
    items = cursor.to_dict()
    return list(items), list(items.values())


def _rows_to_envelopes(rows: Sequence[asyncpg.Record]) -> list[StoredEnvelope]:
    return [StoredEnvelope(r[0], r[1], r[2], r[3], r[4] or 0) for r in rows]


@driver_errors_translated
class EnvelopeStore:
    def __init__(self, pool: asyncpg.Pool, clock: Clock = SYSTEM_CLOCK) -> None:
        self.pool = pool
        self._clock = clock  # what "expired" is measured against

    async def _fetch(
        self, query: EnvelopeQuery, limit: int, budget: int | None
    ) -> list[asyncpg.Record]:
        """The query's rows; with a `budget`, through _within_budget's statements."""
        nodes, seqs = _cursor_arrays(query.cursor)
        within = budget is not None
        keys: list[bytes] | list[int]
        if query.topics:
            sql = _TOPIC_QUERY_WITHIN if within else _TOPIC_QUERY
            keys = list(query.topics)
        else:
            sql = _ORIGINATOR_QUERY_WITHIN if within else _ORIGINATOR_QUERY
            keys = list(query.originators)
        extra = (budget,) if within else ()
        rows: list[asyncpg.Record] = await self.pool.fetch(
            sql, keys, nodes, seqs, self._clock.now_s(), limit, *extra
        )
        return rows

    async def query(self, query: EnvelopeQuery, limit: int) -> list[StoredEnvelope]:
        return _rows_to_envelopes(await self._fetch(query, limit, None))

    async def query_within(
        self, query: EnvelopeQuery, limit: int, budget: int
    ) -> tuple[list[StoredEnvelope], bool]:
        """Like query, but the envelopes' bytes stop at `budget` (always the first); and
        whether that left rows out."""
        rows = await self._fetch(query, limit, budget)
        return _rows_to_envelopes(rows), bool(rows and rows[0]["cut"])

    async def originator_range(
        self, originator: int, after: int, up_to: int
    ) -> list[StoredEnvelope]:
        rows = await self.pool.fetch(
            _ORIGINATOR_RANGE,
            originator,
            after,
            up_to,
        )
        return _rows_to_envelopes(rows)

    async def newest(self, topics: Sequence[bytes], budget: int) -> list[bytes | None]:
        """The newest envelope of each topic, for the topics whose envelopes' bytes fit
        `budget` in request order (always the first): a prefix of `topics`."""
        rows = await self.pool.fetch(_NEWEST_WITHIN, list(topics), self._clock.now_s(), budget)
        return [r[1] for r in rows]

    async def vector_clock(self) -> Cursor:
        return Cursor(await read_vector_clock(self.pool))


async def read_vector_clock(db: asyncpg.Pool | asyncpg.Connection) -> dict[int, int]:
    """{originator: highest sequence id} the database holds (its vector clock)."""
    rows = await db.fetch("SELECT originator_node_id, sequence_id FROM vector_clock")
    return {int(r[0]): int(r[1]) for r in rows}
