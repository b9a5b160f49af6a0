"""Applies the alembic migrations in `migrations/` (the only way the schema changes)."""

from __future__ import annotations

import threading
from pathlib import Path

from alembic import command
from alembic.config import Config

# alembic keeps its context in module globals: one upgrade at a time per process.
# Across processes, migrations/env.py serializes with an advisory lock.
_ONE_AT_A_TIME = threading.Lock()


def migrations_dir(configured: Path | None = None) -> Path:
    """`configured`: the setting migrations_dir (a container's copy); else the checkout's."""
    if configured is not None:
        return configured
    return Path(__file__).resolve().parents[3] / "migrations"


def sqlalchemy_url(dsn: str) -> str:
    scheme, _, rest = dsn.partition("://")
    if scheme not in ("postgres", "postgresql"):
        raise ValueError(f"database DSN must start with postgresql://, got {scheme}://")
    return f"postgresql+asyncpg://{rest}"


def upgrade_to_head(dsn: str, configured: Path | None = None) -> None:
    """Blocking; run it in a thread from async code (alembic's env starts its own loop).
    `configured`: the migrations' directory, when not the checkout's."""
    directory = migrations_dir(configured)
    if not (directory / "env.py").is_file():
        raise FileNotFoundError(f"alembic migrations not found in {directory}")
    config = Config()
    config.set_main_option("script_location", str(directory))
    config.set_main_option("sqlalchemy.url", sqlalchemy_url(dsn).replace("%", "%%"))
    with _ONE_AT_A_TIME:
        command.upgrade(config, "head")
