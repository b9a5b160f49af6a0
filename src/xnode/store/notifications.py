"""Commit notices between processes sharing the database: each commit sends one on
NOTIFY_CHANNEL, `token|originator:highest,...`; every process LISTENs for the others'
(reconnecting as needed) so its live subscribers see their commits too.

A notice sent while a listener is disconnected (the database restarted, a failover) is lost
to it: NOTIFY keeps nothing for absent listeners. So each time it starts listening, the
listener reads the database's vector clock and passes it on like a notice: whatever was
committed before it listened is fetched, whatever after arrives as notices."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable

import asyncpg

from xnode.observability.outage import DatabaseOutage
from xnode.store.envelopes import read_vector_clock
from xnode.store.primary import Connect

NOTIFY_CHANNEL = "xnode_envelopes"
LOST = ""  # queued when the listening connection is lost: no notice is empty

OnCommitted = Callable[[dict[int, int]], Awaitable[None]]


def commit_notice(token: str, keys: Iterable[tuple[int, int]]) -> str:
    """The notice for committed (originator, sequence id) keys: the highest per originator,
    which is what other processes fetch up to for their live subscribers."""
    top: dict[int, int] = {}
    for node_id, seq in keys:
        top[node_id] = max(seq, top.get(node_id, 0))
    return f"{token}|" + ",".join(f"{n}:{s}" for n, s in top.items())


def parse_notice(payload: str) -> dict[int, int]:
    """{originator: highest sequence id} from a notice's part after the token."""
    pairs = (item.split(":") for item in payload.split(",") if item)
    return {int(n): int(s) for n, s in pairs}


class CommitListener:
    """Calls `on_committed` with each foreign notice's {originator: highest sequence id}.

    Notices that this process sent itself carry its token and are skipped. Losing the
    database is told to `outage` (logged once per outage, not at every retry)."""

    def __init__(
        self, connect: Connect, token: str, on_committed: OnCommitted, outage: DatabaseOutage
    ) -> None:
        self._connect = connect
        self._token = token
        self._on_committed = on_committed
        self._outage = outage
        self._task: asyncio.Task[None] | None = None
        self._queue: asyncio.Queue[str] = asyncio.Queue()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="commit-listener")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def _on_notify(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        self._queue.put_nowait(str(payload))  # a NOTIFY payload is text

    def _on_lost(self, _conn: object) -> None:
        self._queue.put_nowait(LOST)  # wakes the pump, which then finds the connection closed

    async def _run(self) -> None:
        delay = 0.5
        while True:
            try:
                conn = await self._connect()
            except (OSError, asyncpg.PostgresError) as exc:
                self._outage.failed("commit_listener", exc, retry_s=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)
                continue
            delay = 0.5
            try:
                await conn.add_listener(NOTIFY_CHANNEL, self._on_notify)
                conn.add_termination_listener(self._on_lost)
                await self._on_committed(await read_vector_clock(conn))
                await self._pump(conn)
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:  # lost
                self._outage.failed("commit_listener", exc, retry_s=delay)
                await asyncio.sleep(delay)
            finally:
                await conn.close()

    async def _pump(self, conn: asyncpg.Connection) -> None:
        while not conn.is_closed():
            try:
                # Not wait_for: on Python 3.11 it swallows a cancel that comes with a notice.
                async with asyncio.timeout(5.0):
                    payload = await self._queue.get()
            except TimeoutError:
                continue
            if payload == LOST:
                continue
            token, _, notice = payload.partition("|")
            if token != self._token:
                await self._on_committed(parse_notice(notice))
