"""A command's one database connection: a database that cannot be reached is one line for
the user (the command's own error), not a traceback."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import asyncpg

from xnode.usecases.ports import StoreUnavailable

# What a lost or refused connection raises, at connect time or in the middle of a statement
# (the store's port classes say StoreUnavailable for it).
DATABASE_ERRORS = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, StoreUnavailable)


@asynccontextmanager
async def connection(
    dsn: str, error: Callable[[str], Exception]
) -> AsyncIterator[asyncpg.Connection]:
    """Connects, or raises `error("cannot connect to the database: ...")`; closes on exit."""
    try:
        conn = await asyncpg.connect(dsn)
    except DATABASE_ERRORS as exc:
        raise error(f"cannot connect to the database: {exc}") from None
    try:
        yield conn
    finally:
        await conn.close()
