"""Reads what `xnode export` writes, in bounded keyset pages (asyncpg).

No long transaction and no server-side cursor: each page is one short statement that resumes
after the last key, so an export of a huge table neither holds back vacuum nor loads the table.
Expired envelopes are exported too: deciding what has expired is the retention job's work.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

import asyncpg


class ExportSourceError(RuntimeError):
    """The database cannot be exported (not a node's database, or no schema)."""


@dataclass(frozen=True, slots=True)
class EnvelopePage:
    """Consecutive rows of one originator, in sequence order, as columns (the shape the
    Parquet writer takes: xnode.export.ports.EnvelopeRows)."""

    originator_node_id: int
    sequence_ids: list[int]
    originator_ns: list[int]
    topics: list[bytes]
    expiry_unixtime: list[int | None]
    payer_addresses: list[bytes | None]
    sizes: list[int]
    base_fees: list[int]
    congestion_fees: list[int]
    envelopes: list[bytes] | None  # only when payloads are asked for


@dataclass(frozen=True, slots=True)
class ReportPage:
    """Consecutive misbehavior reports, in id order (xnode.export.ports.ReportRows)."""

    ids: list[int]
    server_time_ns: list[int]
    misbehaving_node_ids: list[int]
    types: list[int]
    submitted_by_node: list[bool]
    reports: list[bytes]


# Distinct originators by a loose index scan of the primary key: one probe per originator
# instead of a scan of every row.
_ORIGINATORS = """
WITH RECURSIVE o(id) AS (
    (SELECT originator_node_id FROM originator_envelopes ORDER BY 1 LIMIT 1)
    UNION ALL
    SELECT (SELECT originator_node_id FROM originator_envelopes
            WHERE originator_node_id > o.id ORDER BY 1 LIMIT 1)
    FROM o WHERE o.id IS NOT NULL
)
SELECT id FROM o WHERE id IS NOT NULL
"""

_ENVELOPE_PAGE = """
SELECT originator_sequence_id, originator_ns, topic, expiry_unixtime, payer_address,
       octet_length(envelope), base_fee_picodollars, congestion_fee_picodollars{payload}
FROM originator_envelopes
WHERE originator_node_id = $1 AND originator_sequence_id > $2 AND originator_sequence_id <= $3
ORDER BY originator_sequence_id
LIMIT $4
"""

_REPORT_PAGE = """
SELECT id, server_time_ns, misbehaving_node_id, type, submitted_by_node, report
FROM misbehavior_reports WHERE id > $1 AND id <= $2 ORDER BY id LIMIT $3
"""


# (table, keyset columns, selected columns) of the committed-log tables
_LEAVES = (
    "log_leaves",
    "originator_node_id, sequence_id",
    "originator_node_id, sequence_id, leaf_hash, expiry",
)
_CHECKPOINTS = (
    "log_checkpoints",
    "id",
    "id, originator_node_id, tree_size, signed, conflict",
)
_FORKS = (
    "sequence_forks",
    "originator_node_id, originator_sequence_id, envelope_hash",
    "originator_node_id, originator_sequence_id, envelope_hash, envelope",
)


@dataclass(frozen=True, slots=True)
class Pending:
    """What is new since a watermark, bounded at the start of the export: rows committed
    while it runs are left for the next one, so the counts (and the progress bar) hold."""

    envelope_tops: dict[int, int]  # originator -> highest sequence id to export
    envelope_count: int
    report_top: int
    report_count: int


class ExportSource:
    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn

    async def node_identity(self) -> tuple[int, bytes]:
        """(node id, public key) from node_info, which the node fills at its first start."""
        try:
            row = await self._conn.fetchrow("SELECT node_id, public_key FROM node_info")
        except asyncpg.UndefinedTableError:
            raise ExportSourceError(
                "the database has no xnode schema (run `xnode migrate`, then start the node)"
            ) from None
        if row is None:
            raise ExportSourceError(
                "node_info is empty: this database has not been used by a node yet"
            )
        return int(row[0]), bytes(row[1])

    async def pending(self, envelope_marks: Mapping[int, int], report_mark: int) -> Pending:
        tops: dict[int, int] = {}
        count = 0
        for originator in [r[0] for r in await self._conn.fetch(_ORIGINATORS)]:
            after = envelope_marks.get(originator, 0)
            row = await self._conn.fetchrow(
                "SELECT max(originator_sequence_id), count(*) FROM originator_envelopes"
                " WHERE originator_node_id = $1 AND originator_sequence_id > $2",
                originator,
                after,
            )
            assert row is not None  # an aggregate always returns a row
            if row[1]:
                tops[originator] = int(row[0])
                count += int(row[1])
        report = await self._conn.fetchrow(
            "SELECT coalesce(max(id), 0), count(*) FROM misbehavior_reports WHERE id > $1",
            report_mark,
        )
        assert report is not None
        return Pending(tops, count, int(report[0]), int(report[1]))

    async def envelope_pages(
        self, originator: int, after: int, up_to: int, page_size: int, with_payloads: bool
    ) -> AsyncIterator[EnvelopePage]:
        sql = _ENVELOPE_PAGE.format(payload=", envelope" if with_payloads else "")
        while after < up_to:
            rows = await self._conn.fetch(sql, originator, after, up_to, page_size)
            if not rows:
                return
            yield EnvelopePage(
                originator,
                [r[0] for r in rows],
                [r[1] for r in rows],
                [bytes(r[2]) for r in rows],
                [r[3] for r in rows],
                [None if r[4] is None else bytes(r[4]) for r in rows],
                [r[5] for r in rows],
                [r[6] for r in rows],
                [r[7] for r in rows],
                [bytes(r[8]) for r in rows] if with_payloads else None,
            )
            after = rows[-1][0]

    async def report_pages(
        self, after: int, up_to: int, page_size: int
    ) -> AsyncIterator[ReportPage]:
        while after < up_to:
            rows = await self._conn.fetch(_REPORT_PAGE, after, up_to, page_size)
            if not rows:
                return
            yield ReportPage(
                [r[0] for r in rows],
                [r[1] for r in rows],
                [r[2] for r in rows],
                [r[3] for r in rows],
                [r[4] for r in rows],
                [bytes(r[5]) for r in rows],
            )
            after = rows[-1][0]

    def leaf_pages(self, page_size: int) -> AsyncIterator[list[asyncpg.Record]]:
        """(originator, sequence id, leaf hash, committed expiry or None for format 1) of every
        leaf held, expired envelopes' too."""
        return self._pages(*_LEAVES, page_size)

    def checkpoint_pages(self, page_size: int) -> AsyncIterator[list[asyncpg.Record]]:
        """(id, originator, tree size, signed, conflict) of every checkpoint stored."""
        return self._pages(*_CHECKPOINTS, page_size)

    def fork_pages(self, page_size: int) -> AsyncIterator[list[asyncpg.Record]]:
        """(originator, sequence id, envelope hash, envelope) of every forked version."""
        return self._pages(*_FORKS, page_size)

    async def _pages(
        self, table: str, key: str, columns: str, page_size: int
    ) -> AsyncIterator[list[asyncpg.Record]]:
        """All rows of one committed-log table, in `key` order, a keyset page at a time."""
        last: tuple[object, ...] | None = None
        keys = key.split(", ")
        while True:
            if last is None:
                rows = await self._conn.fetch(
                    f"SELECT {columns} FROM {table} ORDER BY {key} LIMIT $1", page_size
                )
            else:
                marks = ", ".join(f"${i + 2}" for i in range(len(keys)))
                rows = await self._conn.fetch(
                    f"SELECT {columns} FROM {table} WHERE ({key}) > ({marks})"
                    f" ORDER BY {key} LIMIT $1",
                    page_size,
                    *last,
                )
            if not rows:
                return
            yield list(rows)
            last = tuple(rows[-1][k] for k in keys)
