"""Maps the core's refusals to gRPC statuses, and store failures to UNAVAILABLE."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import asyncpg
import grpc
import structlog

from xnode.core.envelopes import cursor_to_proto
from xnode.core.errors import Reason, Rejected
from xnode.observability.metrics import PUBLISH_REJECTED

log = structlog.get_logger(__name__)

STATUS_OF = {
    Reason.MALFORMED: grpc.StatusCode.INVALID_ARGUMENT,
    Reason.MISSING_PAYLOAD: grpc.StatusCode.INVALID_ARGUMENT,
    Reason.BAD_TOPIC: grpc.StatusCode.INVALID_ARGUMENT,
    Reason.TOPIC_MISMATCH: grpc.StatusCode.INVALID_ARGUMENT,
    Reason.WRONG_ORIGINATOR: grpc.StatusCode.INVALID_ARGUMENT,
    Reason.BAD_SIGNATURE: grpc.StatusCode.INVALID_ARGUMENT,
    Reason.INVALID_PAYLOAD: grpc.StatusCode.INVALID_ARGUMENT,
    Reason.LIMIT_EXCEEDED: grpc.StatusCode.INVALID_ARGUMENT,
    # The XIP's 409: the client retries once this node has caught up.
    Reason.DEPENDS_ON_AHEAD: grpc.StatusCode.ABORTED,
    Reason.CHAIN_DEPENDS_ON_MISMATCH: grpc.StatusCode.ABORTED,
    Reason.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
}

# The node's cursor travels with DEPENDS_ON_AHEAD as a serialized Cursor.
CURSOR_TRAILER = "xnode-cursor-bin"

T = TypeVar("T")
StoreErrors = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError)


async def abort_rejected(context: grpc.aio.ServicerContext[Any, Any], exc: Rejected) -> None:
    PUBLISH_REJECTED.labels(exc.reason.value).inc()
    if exc.cursor is not None:
        context.set_trailing_metadata(
            ((CURSOR_TRAILER, cursor_to_proto(exc.cursor).SerializeToString()),)
        )
    await context.abort(STATUS_OF[exc.reason], str(exc))


async def abort_store(
    context: grpc.aio.ServicerContext[Any, Any], method: str, exc: BaseException
) -> None:
    log.error("store_unavailable", method=method, error=repr(exc))
    await context.abort(
        grpc.StatusCode.UNAVAILABLE, "the envelope store is unavailable; retry shortly"
    )


def unary_errors(
    fn: Callable[[Any, Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[T]],
) -> Callable[[Any, Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[T]]:
    @functools.wraps(fn)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> T:
        try:
            return await fn(self, request, context)
        except Rejected as exc:
            await abort_rejected(context, exc)
        except StoreErrors as exc:
            await abort_store(context, fn.__name__, exc)
        raise AssertionError("unreachable: abort raises")

    return wrapper


def stream_errors(
    fn: Callable[[Any, Any, grpc.aio.ServicerContext[Any, Any]], AsyncIterator[T]],
) -> Callable[[Any, Any, grpc.aio.ServicerContext[Any, Any]], AsyncIterator[T]]:
    @functools.wraps(fn)
    async def wrapper(
        self: Any, request: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[T]:
        try:
            async for item in fn(self, request, context):
                yield item
        except Rejected as exc:
            await abort_rejected(context, exc)
        except StoreErrors as exc:
            await abort_store(context, fn.__name__, exc)

    return wrapper
