"""Calls in progress per caller on the gRPC port: grpcio has no per-IP connection cap (its
one cap, `grpc.max_allowed_incoming_connections`, is for the whole server, which one IP
could fill), so the closest control it leaves is the calls each client IP (or peer node,
by its token) may have open at once. A call over the cap ends at once with
RESOURCE_EXHAUSTED, before its handler reads anything; the connections themselves are for
a proxy's per-IP limit in front of the node (docs/operations.md, "Connections")."""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import grpc

from xnode.api.auth import Context, Interceptor
from xnode.observability.metrics import GRPC_CALLS_REFUSED
from xnode.usecases.limits import Caller

if TYPE_CHECKING:
    from xnode.api.auth import Continuation


class TooManyCalls(Exception):
    pass


class CallsPerCallerInterceptor(Interceptor):
    """`cap`: calls one caller may have in progress at once, streams included."""

    def __init__(self, cap: int, caller: Callable[[Context], Caller]) -> None:
        self._cap = cap
        self._caller = caller
        self._open: Counter[str] = Counter()

    @property
    def open_calls(self) -> int:
        return sum(self._open.values())

    @contextmanager
    def _held(self, context: Context) -> Iterator[None]:
        subject = self._caller(context).subject
        if self._open[subject] >= self._cap:
            GRPC_CALLS_REFUSED.inc()
            raise TooManyCalls(
                f"{subject} has {self._open[subject]} calls in progress on this node, the "
                f"most one caller may (grpc_calls_per_ip): wait for some to end"
            )
        self._open[subject] += 1
        try:
            yield
        finally:
            self._open[subject] -= 1
            if not self._open[subject]:
                del self._open[subject]

    async def intercept_service(
        self,
        continuation: Continuation,
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        codecs = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(self._wrapped(handler.unary_unary), **codecs)
        if handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                self._wrapped(handler.stream_unary), **codecs
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._wrapped(handler.unary_stream), **codecs
            )
        return grpc.stream_stream_rpc_method_handler(self._wrapped(handler.stream_stream), **codecs)

    def _wrapped(self, behavior: Any) -> Any:
        """`behavior` held while it runs, of the same kind: grpc.aio tells a coroutine
        (unary answers, or streams written with context.write) from an async generator by
        the function. Sync behaviors (none here) run in grpc's executor, unheld."""
        if inspect.isasyncgenfunction(behavior):
            return self._generator(behavior)
        if inspect.iscoroutinefunction(behavior):
            return self._coroutine(behavior)
        return behavior

    def _coroutine(self, behavior: Any) -> Any:
        async def held(request: Any, context: Context) -> Any:
            try:
                with self._held(context):
                    return await behavior(request, context)
            except TooManyCalls as exc:
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))

        return held

    def _generator(self, behavior: Any) -> Any:
        async def held(request: Any, context: Context) -> AsyncIterator[Any]:
            try:
                with self._held(context):
                    async for item in behavior(request, context):
                        yield item
            except TooManyCalls as exc:
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))

        return held
