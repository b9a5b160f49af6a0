"""Per-caller limits on the APIs whose use cases charge none of their own: the extensions
(LogApi, HoldingsApi, ForkApi, FeesApi, CompletenessApi). Without them a stranger could ask
for 700 signed holdings answers a second, or follow checkpoints outside the subscription
limits.

Each unary call is charged as a query (the caller's query buckets: a proof, a fingerprint
round or a signed answer costs what a query does), each server stream (SubscribeCheckpoints)
as a subscription, held like SubscribeTopics' for as long as it is open. Refusals are the
limits' RESOURCE_EXHAUSTED (api.errors)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

import grpc

from xnode.api.auth import Context, Interceptor, StreamBehavior
from xnode.api.errors import StoreErrors, abort_limited, abort_store
from xnode.core.limits import LimitExceeded
from xnode.observability.outage import DatabaseOutage
from xnode.usecases.limits import ApiLimits, Caller

if TYPE_CHECKING:
    from xnode.api.auth import Continuation

Unary = Callable[[Any, Context], Awaitable[Any]]


class LimitsInterceptor(Interceptor):
    """`services`: full service names (xnode.logs.v1.LogApi, ...) to charge."""

    def __init__(
        self,
        limits: ApiLimits,
        caller: Callable[[Context], Caller],
        services: Iterable[str],
        outage: DatabaseOutage,
    ) -> None:
        """`outage`: told when the limits' shared buckets (in the database) cannot be read;
        the call is then UNAVAILABLE, as the API's own would be."""
        self._limits = limits
        self._caller = caller
        self._services = frozenset(services)
        self._outage = outage

    async def intercept_service(
        self,
        continuation: Continuation,
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        service = handler_call_details.method.lstrip("/").rpartition("/")[0]
        if handler is None or service not in self._services:
            return handler
        api, method = service.rpartition(".")[2], handler_call_details.method.rpartition("/")[2]
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._queried(handler.unary_unary, api, method),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._subscribed(handler.unary_stream, api, method),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler  # client streams: none on these services

    async def _refused(self, context: Context, exc: Exception, api: str, method: str) -> None:
        if isinstance(exc, LimitExceeded):
            await abort_limited(context, exc, api)
        await abort_store(context, api, method, exc, self._outage)

    def _queried(self, behavior: Any, api: str, method: str) -> Unary:
        async def limited(request: Any, context: Context) -> Any:
            try:
                await self._limits.query(self._caller(context))
            except (LimitExceeded, *StoreErrors) as exc:
                await self._refused(context, exc, api, method)
            return await behavior(request, context)

        return limited

    def _subscribed(self, behavior: Any, api: str, method: str) -> StreamBehavior:
        async def limited(request: Any, context: Context) -> AsyncIterator[Any]:
            caller = self._caller(context)
            async with AsyncExitStack() as held:
                try:
                    await self._limits.subscribe(caller)
                    await held.enter_async_context(self._limits.subscription(caller))
                except (LimitExceeded, *StoreErrors) as exc:
                    await self._refused(context, exc, api, method)
                    return
                async for item in behavior(request, context):
                    yield item

        return limited
