"""Commit notices between the processes of one node: a listener that lost its connection
(the database restarted, a failover) hears nothing of the commits made meanwhile, since
NOTIFY keeps nothing for absent listeners; when it listens again it reads what the
database committed and passes it on, so the live subscribers of its process get them."""

from __future__ import annotations

import asyncpg

from tests.support.waiting import eventually
from xnode.observability.outage import DatabaseOutage
from xnode.store.notifications import NOTIFY_CHANNEL, CommitListener, commit_notice

OTHER = 200  # an originator another process of the node stores envelopes of


class Heard:
    """The listener's callback: every {originator: highest sequence id} it passed on."""

    def __init__(self) -> None:
        self.tops: list[dict[int, int]] = []

    async def __call__(self, tops: dict[int, int]) -> None:
        self.tops.append(tops)

    def highest(self, originator: int) -> int:
        return max((t.get(originator, 0) for t in self.tops), default=0)


async def _committed(db: asyncpg.Connection, sequence_id: int, notify: bool) -> None:
    """Another process committed OTHER's envelopes up to `sequence_id` (and said so)."""
    await db.execute(
        "INSERT INTO vector_clock (originator_node_id, sequence_id) VALUES ($1, $2)"
        " ON CONFLICT (originator_node_id) DO UPDATE SET sequence_id = excluded.sequence_id",
        OTHER,
        sequence_id,
    )
    if notify:
        await db.execute(
            "SELECT pg_notify($1, $2)", NOTIFY_CHANNEL, commit_notice("b", [(OTHER, sequence_id)])
        )


async def test_commits_made_while_the_listener_was_cut_off_reach_it(database: str) -> None:
    heard = Heard()
    listening: list[asyncpg.Connection] = []

    async def connect() -> asyncpg.Connection:
        conn = await asyncpg.connect(database)
        listening.append(conn)
        return conn

    listener = CommitListener(connect, "a", heard, DatabaseOutage(lambda: "db"))
    db = await asyncpg.connect(database)
    try:
        listener.start()
        await eventually(lambda: bool(listening) and bool(heard.tops), 10, "listening")
        await _committed(db, 5, notify=True)
        await eventually(lambda: heard.highest(OTHER) == 5, 10, "the notice for 5")

        await db.execute("SELECT pg_terminate_backend($1)", listening[-1].get_server_pid())
        # Committed while it is cut off: a notice then would be lost to it, so none is sent.
        await _committed(db, 9, notify=False)
        await eventually(lambda: len(listening) == 2, 3, "the listener connected again")
        await eventually(lambda: heard.highest(OTHER) == 9, 3, "commits made while cut off")
    finally:
        await listener.stop()
        await db.close()
        for conn in listening:
            await conn.close()
