"""The gateway's refusals: its own (bad input, no node available) and the nodes', which keep
the node's status and message, re-indexed to the client's request."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import structlog

from xnode.api.errors import CURSOR_TRAILER, StatusError, abort_limited, abort_status
from xnode.core.limits import LimitExceeded
from xnode.gateway.clients import Unauthenticated

log = structlog.get_logger(__name__)

# Our node names the failing envelope of a batch like this; the gateway renames it to the
# client's index.
_NODE_INDEX = re.compile(r"^payer_envelopes\[(\d+)\]: ")


class GatewayError(StatusError):
    """A refusal for the client: the status, a message, and trailers to pass on."""


class NodeUnavailable(Exception):
    """The node cannot take envelopes now (down, draining, its chain unreachable)."""

    def __init__(self, node_id: int, detail: str) -> None:
        super().__init__(detail)
        self.node_id = node_id
        self.detail = detail


async def abort_gateway_error(context: Any, exc: Exception) -> None:
    """The gateway's statuses, from the node API's mapping (limits as a node answers them;
    no store of its own, so no retry-later for an OSError: envelopes may be published)."""
    if isinstance(exc, StatusError):
        await abort_status(context, exc)
    if isinstance(exc, LimitExceeded):
        await abort_limited(context, exc, "gateway")
    if isinstance(exc, Unauthenticated):
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(exc))
    raise exc


def gateway_errors(
    fn: Callable[[bytes, Any], Awaitable[bytes]],
) -> Callable[[bytes, Any], Awaitable[bytes]]:
    async def handler(request: bytes, context: Any) -> bytes:
        try:
            return await fn(request, context)
        except (StatusError, LimitExceeded, Unauthenticated) as exc:
            await abort_gateway_error(context, exc)
        raise AssertionError("unreachable: abort raises")

    return handler


def invalid(index: int, detail: str) -> GatewayError:
    return GatewayError(grpc.StatusCode.INVALID_ARGUMENT, f"envelopes[{index}]: {detail}")


def stored_note(start: int) -> str:
    return f" (envelopes before index {start} were published)" if start else ""


def node_error(node_id: int, exc: grpc.aio.AioRpcError, start: int, count: int) -> BaseException:
    code, detail = exc.code(), exc.details() or ""
    if code is grpc.StatusCode.UNAVAILABLE:
        return NodeUnavailable(node_id, detail)
    if code is grpc.StatusCode.DEADLINE_EXCEEDED:
        # The node may have stored them: sending them elsewhere could publish them twice.
        return GatewayError(
            code,
            f"node {node_id} did not answer in time; envelopes[{start}:{start + count}] "
            "may or may not have been published" + stored_note(start),
        )
    match = _NODE_INDEX.match(detail)
    if match:
        detail = f"envelopes[{start + int(match.group(1))}]: {detail[match.end() :]}"
    else:
        detail = f"envelopes[{start}:{start + count}]: {detail}"
    # The node's cursor (ABORTED, depends_on ahead) lets the client see how far it is.
    metadata: Any = exc.trailing_metadata() or ()
    trailers = tuple((str(k), v) for k, v in metadata if k == CURSOR_TRAILER)
    log.info("gateway_publish_refused", node_id=node_id, code=code.name, detail=detail)
    return GatewayError(code, f"{detail} (node {node_id})" + stored_note(start), trailers)
