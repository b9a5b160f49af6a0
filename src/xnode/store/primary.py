"""The node's database on several hosts (a Patroni primary and standbys): which one to write to.

A multi-host DSN (`postgresql://u@h1:p1,h2:p2/db?target_session_attrs=read-write`) names
every host. asyncpg tries them one after another under one connect timeout, so a host frozen
rather than down (its kernel still accepts connections) holds up every later host; and after
a failover an old primary that comes back may take writes until Patroni demotes it. So hosts
are asked at once, each under its own timeout, and among those that take writes the one on
the newest timeline wins: a promotion starts a timeline, and an old primary's commits there
never reach the new one, so they must never be answered. When the primary changes, every
connection to another host is cut at once (publishes waiting on a frozen host get
UNAVAILABLE) and new ones go to the new primary.

A host that lets a question time out is silent (frozen, or behind a network that drops
packets): it is asked again in the background, one question at a time, and the next looks
do not wait for it. Waiting a whole timeout for it at every look held up seeing the standby's
promotion by up to a timeout, and a new connection tried the silent old primary first.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg
import structlog

from xnode.usecases.concurrency import Repeating

log = structlog.get_logger(__name__)

# Whether the host takes writes, and its timeline (the WAL file name's first 8 hex digits):
# a promotion moves to the next timeline.
_ROLE = """
SELECT NOT pg_is_in_recovery(),
       CASE WHEN pg_is_in_recovery() THEN 0
            ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END
"""
SESSION_ATTRS = "target_session_attrs"


# Opens a connection to the node's database (asyncpg.connect's keyword arguments).
Connect = Callable[..., Coroutine[Any, Any, asyncpg.Connection]]


class NoPrimaryError(ConnectionError):
    """No host takes writes now (during a failover): callers answer UNAVAILABLE."""


def host_dsns(dsn: str) -> list[str]:
    """One single-host DSN per host of `dsn`, without target_session_attrs (checked here)."""
    parts = urlsplit(dsn)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k != SESSION_ATTRS])
    return [
        urlunsplit(parts._replace(netloc=f"{userinfo}{at}{host}", query=query))
        for host in hosts.split(",")
    ]


@dataclass(frozen=True)
class HostRole:
    host: int  # index in the DSN's hosts
    writable: bool
    timeline: int


class Database:
    """Connections to the node's database: `connect` for the pool (asyncpg's `connect=`) and
    dedicated connections; `watch` follows the primary. With one host it is asyncpg.connect."""

    def __init__(self, dsn: str, timeout_s: float = 2.0) -> None:
        self.dsn = dsn
        self.hosts = host_dsns(dsn)
        self._timeout_s = timeout_s
        self._primary: int | None = None
        # Hosts whose last question timed out: the question asked again, not waited for.
        self._silent: dict[int, asyncio.Task[HostRole | TimeoutError | None]] = {}
        self._watch: Repeating | None = None
        self._opened: weakref.WeakKeyDictionary[asyncpg.Connection, int] = (
            weakref.WeakKeyDictionary()
        )
        self.changes = 0  # times the primary moved to another host

    @property
    def primary_dsn(self) -> str:
        """The host last found taking writes (the first host before any was asked)."""
        return self.hosts[self._primary or 0]

    @property
    def primary_host(self) -> str:
        """The primary's host:port as its DSN gives it, without credentials (for the logs)."""
        return _host_of(self.primary_dsn)

    async def connect(self, *_args: Any, **kwargs: Any) -> asyncpg.Connection:
        if len(self.hosts) == 1:
            return await asyncpg.connect(self.dsn, **kwargs)
        kwargs.pop("loop", None)
        primary = self._primary
        if primary is not None and primary not in self._silent:
            with contextlib.suppress(OSError, asyncpg.PostgresError):  # TimeoutError included
                try:
                    conn = await self._open(primary, **kwargs)
                except TimeoutError:
                    self._ask_again(primary)
                    raise
                if await conn.fetchval("SELECT NOT pg_is_in_recovery()"):
                    return conn
                conn.terminate()
        return await self._open(await self.find(), **kwargs)

    async def find(self) -> int:
        """Asks every host at once; the writable one on the newest timeline is the primary."""
        roles = await asyncio.gather(*(self._answer(i) for i in range(len(self.hosts))))
        writable = [r for r in roles if r is not None and r.writable]
        if not writable:
            raise NoPrimaryError("no database host takes writes now (a failover?)")
        best = max(writable, key=lambda r: r.timeline)
        self._follow(best.host)
        return best.host

    def start_watch(self, interval_s: float) -> None:
        """Finds the primary every `interval_s` until stop_watch."""
        self._watch = Repeating(self._look, interval_s, "primary-watch")
        self._watch.start()

    async def stop_watch(self) -> None:
        if self._watch is not None:
            await self._watch.stop()
        asking = list(self._silent.values())
        self._silent.clear()
        for task in asking:
            task.cancel()
        await asyncio.gather(*asking, return_exceptions=True)

    async def _look(self) -> None:
        with contextlib.suppress(NoPrimaryError):  # during a failover: look again later
            await self.find()

    async def _open(self, host: int, **kwargs: Any) -> asyncpg.Connection:
        async with asyncio.timeout(self._timeout_s):
            conn: asyncpg.Connection = await asyncpg.connect(self.hosts[host], **kwargs)
        self._opened[conn] = host
        return conn

    async def _answer(self, host: int) -> HostRole | None:
        """The host's role; None if it refuses, or is silent (then asked in the background)."""
        asking = self._silent.get(host)
        if asking is None:
            answer = await self._asked(host)
        elif asking.done():
            answer = asking.result()
        else:
            return None
        if isinstance(answer, TimeoutError):
            self._ask_again(host)
            return None
        self._silent.pop(host, None)
        return answer

    def _ask_again(self, host: int) -> None:
        """The host is silent: asked again in the background, one question at a time."""
        asking = self._silent.get(host)
        if asking is None or asking.done():
            self._silent[host] = asyncio.create_task(self._asked(host), name="ask-host")

    async def _asked(self, host: int) -> HostRole | TimeoutError | None:
        try:
            return await self._role(host)
        except TimeoutError as silent:
            return silent

    async def _role(self, host: int) -> HostRole | None:
        """None if the host refuses; TimeoutError if it does not answer in time."""
        try:
            async with asyncio.timeout(self._timeout_s):
                conn = await asyncpg.connect(self.hosts[host])
                try:
                    row = await conn.fetchrow(_ROLE)
                finally:
                    conn.terminate()
        except TimeoutError:
            raise  # an OSError too, but silence is not a refusal
        except (OSError, asyncpg.PostgresError):
            return None
        assert row is not None  # a SELECT without FROM answers one row
        writable, timeline = row
        return HostRole(host, bool(writable), int(timeline))

    def _follow(self, primary: int) -> None:
        if primary == self._primary:
            return
        if self._primary is not None:
            self.changes += 1
            log.warning(
                "database_primary_changed",
                primary=_host_of(self.hosts[primary]),
                cut=sum(1 for h in self._opened.values() if h != primary),
            )
        self._primary = primary
        for conn, host in list(self._opened.items()):
            if host != primary:
                _cut(conn)


def _host_of(dsn: str) -> str:
    """host:port, or the socket directory of a DSN that gives it as `?host=`."""
    parts = urlsplit(dsn)
    return parts.netloc.rpartition("@")[2] or dict(parse_qsl(parts.query)).get("host", "")


def _cut(conn: asyncpg.Connection) -> None:
    """Drops the connection's socket, as a lost network would: its query in flight fails
    (ConnectionDoesNotExistError: UNAVAILABLE) and the pool replaces it when it is released.
    No goodbye, since the old host may be frozen. Not Connection.terminate(): on a pool
    connection in use that hands its holder back to the pool while its user still holds it,
    and asyncpg then refuses the user's release (InternalClientError). asyncpg offers no
    public way to fail a connection in use, hence its transport."""
    transport = getattr(conn, "_transport", None)
    if transport is not None:
        transport.abort()
    else:
        conn.terminate()
