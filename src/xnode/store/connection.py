"""What the store's statements run on: a connection of its own, or one the pool lends (a
proxy of one, to the type checker another class)."""

from __future__ import annotations

from typing import TypeAlias

import asyncpg
from asyncpg.pool import PoolConnectionProxy

PgConnection: TypeAlias = asyncpg.Connection | PoolConnectionProxy
