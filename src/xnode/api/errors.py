"""The one mapping of errors to gRPC statuses: the core's refusals by reason, limits,
store failures UNAVAILABLE (retry later) and, per API, errors of its own (`statuses`);
counts refusals per API, method and reason. Every servicer is registered through it.

A store failure is told to the node's DatabaseOutage, which logs the outage once; each
request refused during it is only counted (and logged at debug)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, TypeVar

import grpc
from google.protobuf.descriptor import ServiceDescriptor

from xnode.core.envelopes import cursor_to_proto
from xnode.core.errors import Reason, Rejected
from xnode.core.limits import Kind, LimitExceeded, NeverFits
from xnode.observability.metrics import LIMITED, REQUESTS_REJECTED
from xnode.observability.outage import DatabaseOutage
from xnode.usecases.ports import StoreUnavailable

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
    Reason.ALREADY_PUBLISHED: grpc.StatusCode.ALREADY_EXISTS,
}

# The node's cursor travels with DEPENDS_ON_AHEAD as a serialized Cursor.
CURSOR_TRAILER = "xnode-cursor-bin"

T = TypeVar("T")
Context = grpc.aio.ServicerContext[Any, Any]
# The store's failures, and a socket failure below the API that no adapter translated:
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


async def abort_store(
    context: Context, api: str, method: str, exc: BaseException, outage: DatabaseOutage
) -> None:
    count_rejected(api, method, Reason.UNAVAILABLE.value)
    outage.refused(method, exc)
    await context.abort(
        grpc.StatusCode.UNAVAILABLE, "the envelope store is unavailable; retry shortly"
    )


# XIP-49 3.2.5: a refused caller learns when to come back (whole seconds, like HTTP's).
RETRY_AFTER_TRAILER = "retry-after"


async def abort_limited(context: Context, exc: LimitExceeded, api: str) -> None:
    LIMITED.labels(api, exc.kind.value).inc()
    if exc.kind is Kind.DENIED:
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, str(exc))
    if isinstance(exc, NeverFits):  # no retry-after: waiting does not help, splitting does
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
    context.set_trailing_metadata(((RETRY_AFTER_TRAILER, str(exc.retry_after_whole_s)),))
    await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))


@dataclass
class StatusError(Exception):
    """A refusal that names its own status and message, with trailers to send (a gateway
    passing on a node's refusal)."""

    code: grpc.StatusCode
    message: str
    trailers: tuple[tuple[str, str | bytes], ...] = ()

    def __str__(self) -> str:
        return self.message


async def abort_status(context: Context, exc: StatusError) -> None:
    if exc.trailers:
        context.set_trailing_metadata(exc.trailers)
    await context.abort(exc.code, exc.message)


# An API's own errors and their statuses, the message being str(error); the first class
# that matches wins.
Statuses = Mapping[type[Exception], grpc.StatusCode]
NO_STATUSES: Statuses = {}


def _caught(statuses: Statuses) -> tuple[type[Exception], ...]:
    return (Rejected, LimitExceeded, *StoreErrors, StatusError, *statuses)


async def abort_error(
    context: Context,
    exc: Exception,
    api: str,
    method: str,
    statuses: Statuses,
    outage: DatabaseOutage,
) -> None:
    """Aborts with the status `exc` maps to; re-raises an error the mapping does not know."""
    if isinstance(exc, Rejected):
        await abort_rejected(context, exc, api, method)
    if isinstance(exc, LimitExceeded):
        await abort_limited(context, exc, api)
    if isinstance(exc, StoreErrors):
        await abort_store(context, api, method, exc, outage)
    if isinstance(exc, StatusError):
        await abort_status(context, exc)
    for kind, code in statuses.items():
        if isinstance(exc, kind):
            await context.abort(code, str(exc))
    raise exc


def unary_errors(
    fn: Callable[[Any, Context], Awaitable[T]],
    api: str,
    method: str,
    outage: DatabaseOutage,
    statuses: Statuses = NO_STATUSES,
) -> Callable[[Any, Context], Awaitable[T]]:
    """`fn` with its errors turned into statuses; `api` is the short name of the service it
    is called under (publish, query, replication, ...); store failures are told to `outage`."""
    caught = _caught(statuses)

    async def handler(request: Any, context: Context) -> T:
        try:
            return await fn(request, context)
        except caught as exc:
            await abort_error(context, exc, api, method, statuses, outage)
        raise AssertionError("unreachable: abort raises")

    return handler


def stream_errors(
    fn: Callable[[Any, Context], AsyncIterator[T]],
    api: str,
    method: str,
    outage: DatabaseOutage,
    statuses: Statuses = NO_STATUSES,
) -> Callable[[Any, Context], AsyncIterator[T]]:
    caught = _caught(statuses)

    async def handler(request: Any, context: Context) -> AsyncIterator[T]:
        try:
            async for item in fn(request, context):
                yield item
        except caught as exc:
            await abort_error(context, exc, api, method, statuses, outage)

    return handler


def errors_mapped(
    service: object,
    descriptor: ServiceDescriptor,
    api: str,
    outage: DatabaseOutage,
    statuses: Statuses = NO_STATUSES,
) -> Any:
    """`service` with every method of `descriptor` through the mapping, for a generated
    add_...Servicer_to_server."""
    methods = {
        m.name: (stream_errors if m.server_streaming else unary_errors)(
            getattr(service, m.name), api, m.name, outage, statuses
        )
        for m in descriptor.methods
    }
    return SimpleNamespace(**methods)
