"""Alembic environment: applies xnode's migrations over asyncpg, one process at a time."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

# Several xnode processes may start at once against one database; only one migrates.
MIGRATION_LOCK_KEY = 0x786E6F6465  # "xnode"


def _migrate(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=None, transaction_per_migration=False)
    with context.begin_transaction():
        connection.execute(text(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY})"))
        context.run_migrations()


async def _run() -> None:
    url = context.config.get_main_option("sqlalchemy.url")
    assert url is not None
    engine = create_async_engine(url, poolclass=NullPool)
    async with engine.connect() as connection:
        await connection.run_sync(_migrate)
    await engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline migrations are not supported; run `xnode migrate`")
asyncio.run(_run())
