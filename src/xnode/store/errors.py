"""The driver's failures as the store's callers know them: StoreUnavailable (a port's
error), whatever asyncpg or the socket under it raised."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import asyncpg

from xnode.usecases.ports import StoreCorrupt, StoreUnavailable

# asyncpg raises InternalClientError ("cannot switch to state ...") for a query sent on a
# connection its server dropped mid-operation (a database host lost, docs/ha.md): retry.
DRIVER_ERRORS = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    OSError,
)

# data_corrupted (a page whose checksum fails, a block read short) and index_corrupted.
CORRUPT_STATES = frozenset({"XX001", "XX002"})

C = TypeVar("C", bound=type)


def _translated(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def translated(*args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(*args, **kwargs)
        except (asyncpg.DataError, ValueError):
            raise  # a value the database cannot take: a retry fails the same, so no retry
        except asyncpg.InternalServerError as exc:
            if exc.sqlstate in CORRUPT_STATES:
                raise StoreCorrupt(str(exc)) from exc
            raise StoreUnavailable(str(exc) or repr(exc)) from exc
        except DRIVER_ERRORS as exc:
            raise StoreUnavailable(str(exc) or repr(exc)) from exc  # the driver's words

    return translated


def driver_errors_translated(cls: C) -> C:
    """`cls` with every public coroutine method raising StoreUnavailable for a driver failure:
    the store's port classes, whose callers sit above the store."""
    for name, member in list(vars(cls).items()):
        if not name.startswith("_") and inspect.iscoroutinefunction(member):
            setattr(cls, name, _translated(member))
    return cls
