"""What the gateway paid for, per client and UTC day: envelopes, client bytes and the fees
the originators signed into the envelopes they answered (UnsignedOriginatorEnvelope fields 5
and 6, picodollars).

The gateway has no database of its own, so the record is a SQLite file (`usage_file`; in
memory when unset), one row per client and day, added to after every answered publish.
`xnode gateway usage --usage-file FILE` prints it."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path

from xnode.core.envelopes import parse_originator_envelope
from xnode.core.errors import Rejected

_SCHEMA = """
CREATE TABLE IF NOT EXISTS client_usage (
    client TEXT NOT NULL,
    day TEXT NOT NULL,
    envelopes INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    base_fee INTEGER NOT NULL,
    congestion_fee INTEGER NOT NULL,
    PRIMARY KEY (client, day)
)
"""
_ADD = """
INSERT INTO client_usage VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (client, day) DO UPDATE SET
    envelopes = envelopes + excluded.envelopes,
    bytes = bytes + excluded.bytes,
    base_fee = base_fee + excluded.base_fee,
    congestion_fee = congestion_fee + excluded.congestion_fee
"""


@dataclass(frozen=True, slots=True)
class Usage:
    client: str
    day: str  # YYYY-MM-DD, UTC
    envelopes: int
    bytes: int
    base_fee: int  # picodollars
    congestion_fee: int

    @property
    def fees(self) -> int:
        return self.base_fee + self.congestion_fee


def usage_of(client: str, day: date, sent: Sequence[bytes], answers: Sequence[bytes]) -> Usage:
    """One publish: the client's envelopes as sent, the fees of the envelopes answered."""
    base = congestion = 0
    for raw in answers:
        try:
            fees = parse_originator_envelope(raw).fees
        except Rejected:
            continue  # the node answered it, so it decodes; counted as unpaid if not
        base += fees.base
        congestion += fees.congestion
    return Usage(client, day.isoformat(), len(sent), sum(map(len, sent)), base, congestion)


class UsageLog:
    def __init__(self, path: Path | None = None) -> None:
        # One connection, used from worker threads one at a time.
        self._db = sqlite3.connect(str(path) if path else ":memory:", check_same_thread=False)
        self._lock = threading.Lock()
        with self._lock, self._db:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(_SCHEMA)

    def _add(self, usage: Usage) -> None:
        with self._lock, self._db:
            self._db.execute(
                _ADD,
                (
                    usage.client,
                    usage.day,
                    usage.envelopes,
                    usage.bytes,
                    usage.base_fee,
                    usage.congestion_fee,
                ),
            )

    async def record(self, client: str, sent: Sequence[bytes], answers: Sequence[bytes]) -> None:
        today = datetime.now(UTC).date()
        await asyncio.to_thread(self._add, usage_of(client, today, sent, answers))

    def rows(self) -> list[Usage]:
        with self._lock:
            found = self._db.execute(
                "SELECT client, day, envelopes, bytes, base_fee, congestion_fee "
                "FROM client_usage ORDER BY day, client"
            ).fetchall()
        return [Usage(*row) for row in found]

    def close(self) -> None:
        with self._lock:
            self._db.close()


def usage_table(rows: Sequence[Usage]) -> str:
    header = ("day", "client", "envelopes", "bytes", "base fee", "congestion fee", "fees")
    lines = [header] + [
        (
            u.day,
            u.client,
            str(u.envelopes),
            str(u.bytes),
            str(u.base_fee),
            str(u.congestion_fee),
            str(u.fees),
        )
        for u in rows
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(
            cell.ljust(w) if i < 2 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(line, widths, strict=True))
        )
        for line in lines
    )
