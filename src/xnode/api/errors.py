"""Maps the core's refusals to gRPC statuses, and store failures to UNAVAILABLE; counts
refusals per API, method and reason."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
import structlog

from xnode.core.envelopes import cursor_to_proto
from xnode.core.errors import Reason, Rejected
from xnode.core.limits import Kind, LimitExceeded
from xnode.observability.metrics import LIMITED, REQUESTS_REJECTED
from xnode.usecases.ports import StoreUnavailable

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
    # Not a retry: this node never originates; the client must publish elsewhere.
    Reason.READ_ONLY: grpc.StatusCode.FAILED_PRECONDITION,
    Reason.NO_CHAIN: grpc.StatusCode.FAILED_PRECONDITION,
}

# The node's cursor travels with DEPENDS_ON_AHEAD as a serialized Cursor.
CURSOR_TRAILER = "xnode-cursor-bin"

T = TypeVar("T")
Context = grpc.aio.ServicerContext[Any, Any]
# The store's failures, and a socket lost on the way to it (the sequencing worker's link):
# retry later.
StoreErrors = (StoreUnavailable, OSError)


def count_rejected(api: str, method: str, reason: str) -> None:
    REQUESTS_REJECTED.labels(api, method, reason).inc()


async def abort_rejected(context: Context, exc: Rejected, api: str, method: str) -> None:
    count_rejected(api, method, exc.reason.value)
    if exc.cursor is not None:
        context.set_trailing_metadata(
            ((CURSOR_TRAILER, cursor_to_proto(exc.cursor).SerializeToString()),)
        )
    await context.abort(STATUS_OF[exc.reason], str(exc))


async def abort_store(context: Context, method: str, exc: BaseException) -> None:
    log.error("store_unavailable", method=method, error=repr(exc))
    await context.abort(
        grpc.StatusCode.UNAVAILABLE, "the envelope store is unavailable; retry shortly"
    )


# XIP-49 3.2.5: a refused caller learns when to come back (whole seconds, like HTTP's).
RETRY_AFTER_TRAILER = "retry-after"


async def abort_limited(context: Context, exc: LimitExceeded, api: str) -> None:
    LIMITED.labels(api, exc.kind.value).inc()
    if exc.kind is Kind.DENIED:
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, str(exc))
    context.set_trailing_metadata(((RETRY_AFTER_TRAILER, str(exc.retry_after_whole_s)),))
    await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))


def unary_errors(
    fn: Callable[[Any, Context], Awaitable[T]], api: str, method: str
) -> Callable[[Any, Context], Awaitable[T]]:
    """`fn` with refusals and store failures turned into statuses; `api` is the short name
    of the service it is called under (publish, query, replication)."""

    async def handler(request: Any, context: Context) -> T:
        try:
            return await fn(request, context)
        except Rejected as exc:
            await abort_rejected(context, exc, api, method)
        except LimitExceeded as exc:
            await abort_limited(context, exc, api)
        except StoreErrors as exc:
            await abort_store(context, method, exc)
        raise AssertionError("unreachable: abort raises")

    return handler


def stream_errors(
    fn: Callable[[Any, Context], AsyncIterator[T]], api: str, method: str
) -> Callable[[Any, Context], AsyncIterator[T]]:
    async def handler(request: Any, context: Context) -> AsyncIterator[T]:
        try:
            async for item in fn(request, context):
                yield item
        except Rejected as exc:
            await abort_rejected(context, exc, api, method)
        except LimitExceeded as exc:
            await abort_limited(context, exc, api)
        except StoreErrors as exc:
            await abort_store(context, method, exc)

    return handler
