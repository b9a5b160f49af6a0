"""Misbehavior reports this node hosts (XIP-49 3.2.8): its own and clients', each signed by
this node when stored. `server_time_ns` grows strictly, so paging by `after_ns` never skips."""

from __future__ import annotations

import asyncpg
import structlog

from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.core.clock import SYSTEM_CLOCK, Clock
from xnode.core.crypto import SigningKey
from xnode.core.misbehavior import sign_report, type_name
from xnode.observability.metrics import MISBEHAVIOR_REPORTS
from xnode.store.errors import driver_errors_translated
from xnode.usecases.ports import StoreUnavailable

log = structlog.get_logger(__name__)

MAX_QUERY_REPORTS = 1000

_INSERT = """
INSERT INTO misbehavior_reports
    (server_time_ns, misbehaving_node_id, type, submitted_by_node, report)
VALUES ($1, $2, $3, $4, $5)
"""


@driver_errors_translated
class MisbehaviorStore:
    def __init__(self, pool: asyncpg.Pool, key: SigningKey, clock: Clock = SYSTEM_CLOCK) -> None:
        self._pool = pool
        self._key = key
        self._clock = clock

    async def add(self, unsigned: mb.UnsignedMisbehaviorReport) -> mb.MisbehaviorReport:
        async with self._pool.acquire() as conn, conn.transaction():
            # Reports are rare; a table lock is the simplest way to keep times strictly
            # increasing across processes sharing the database.
            await conn.execute("LOCK TABLE misbehavior_reports IN SHARE ROW EXCLUSIVE MODE")
            last = await conn.fetchval("SELECT max(server_time_ns) FROM misbehavior_reports")
            server_ns = max(self._clock.now_ns(), (last or 0) + 1)
            report = sign_report(unsigned, self._key, server_ns)
            await conn.execute(
                _INSERT,
                server_ns,
                unsigned.misbehaving_node_id,
                int(unsigned.type),
                unsigned.submitted_by_node,
                report.SerializeToString(),
            )
        source = "node" if unsigned.submitted_by_node else "client"
        MISBEHAVIOR_REPORTS.labels(type_name(unsigned.type), source).inc()
        return report

    async def after(
        self, after_ns: int, limit: int = MAX_QUERY_REPORTS, budget: int = 0
    ) -> list[bytes]:
        """Serialized MisbehaviorReports stored after `after_ns`, oldest first; with a
        `budget`, only as many as fit it in bytes (always the first: core.sizes)."""
        rows = await self._pool.fetch(_AFTER, after_ns, limit, budget or None)
        return [r[0] for r in rows]


# octet_length reads a report's size without fetching it: what is cut off is never read.
_AFTER = """
SELECT report FROM (
    SELECT report, server_time_ns,
           row_number() OVER w AS n, sum(octet_length(report)) OVER w AS upto
    FROM (SELECT report, server_time_ns FROM misbehavior_reports WHERE server_time_ns > $1
          ORDER BY server_time_ns LIMIT $2) AS q
    WINDOW w AS (ORDER BY server_time_ns ROWS UNBOUNDED PRECEDING)
) AS r
WHERE r.n = 1 OR $3::bigint IS NULL OR r.upto <= $3
ORDER BY server_time_ns
"""


class MisbehaviorLog:
    """Records this node's own reports; a report that cannot be stored is logged, never
    raised, so replication carries on."""

    def __init__(self, store: MisbehaviorStore) -> None:
        self._store = store

    async def record(self, unsigned: mb.UnsignedMisbehaviorReport, detail: str) -> None:
        kind = type_name(unsigned.type)
        try:
            await self._store.add(unsigned)
        except StoreUnavailable as exc:
            log.error(
                "misbehavior_report_not_stored",
                type=kind,
                node_id=unsigned.misbehaving_node_id,
                detail=detail,
                error=repr(exc),
            )
            return
        log.warning(
            "misbehavior_reported", type=kind, node_id=unsigned.misbehaving_node_id, detail=detail
        )
