"""The one error mapping: every method of a service registered through it answers the
core's refusals, store failures, an API's own errors and a relayed status as the clients
expect, and lets an error it does not know through unchanged."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from prometheus_client import REGISTRY
from structlog.testing import capture_logs

from xnode.api.errors import StatusError, errors_mapped
from xnode.api.http import Aborted, HttpContext
from xnode.api.logs import LOG_STATUSES
from xnode.core.errors import Reason, Rejected
from xnode.core.merkle import ProofError
from xnode.observability.outage import DatabaseOutage
from xnode.usecases.logs import NotHeld
from xnode.usecases.ports import StoreUnavailable
from xnode_api.logs.v1 import logs_pb2

LOG_API = logs_pb2.DESCRIPTOR.services_by_name["LogApi"]
OUTAGE = DatabaseOutage(lambda: "127.0.0.1:5432")


class Failing:
    """A LogApi whose every method raises the error it is given."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def __getattr__(self, name: str) -> Any:
        async def unary(request: Any, context: Any) -> Any:
            raise self.error

        async def stream(request: Any, context: Any) -> AsyncIterator[Any]:
            yield b"first"
            raise self.error

        return stream if name.startswith("Subscribe") else unary


async def status(error: Exception, method: str = "GetCheckpoints") -> tuple[Any, str, Any]:
    mapped = errors_mapped(Failing(error), LOG_API, "logs", OUTAGE, LOG_STATUSES)
    context = HttpContext((), "127.0.0.1")
    with pytest.raises(Aborted) as aborted:
        if method.startswith("Subscribe"):
            async for _ in getattr(mapped, method)(None, context):
                pass
        else:
            await getattr(mapped, method)(None, context)
    return aborted.value.code, aborted.value.message, context.trailers


@pytest.mark.parametrize("method", [m.name for m in LOG_API.methods])
async def test_every_method_answers_a_lost_store_retry_later(method: str) -> None:
    code, message, _ = await status(StoreUnavailable("connection lost"), method)
    assert (code, message) == (
        grpc.StatusCode.UNAVAILABLE,
        "the envelope store is unavailable; retry shortly",
    )


async def test_an_apis_own_errors_get_its_statuses_the_first_match_winning() -> None:
    assert (await status(NotHeld("not held")))[:2] == (grpc.StatusCode.NOT_FOUND, "not held")
    # A ProofError is a ValueError too: the more precise status wins.
    assert (await status(ProofError("bad proof")))[:2] == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "bad proof",
    )
    assert (await status(ValueError("too big")))[:2] == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "too big",
    )


async def test_a_refusal_mid_stream_ends_it_with_its_status() -> None:
    code, message, _ = await status(
        Rejected(Reason.UNAVAILABLE, "the node drains"), "SubscribeCheckpoints"
    )
    assert (code, message) == (grpc.StatusCode.UNAVAILABLE, "the node drains")


async def test_a_relayed_status_keeps_its_code_message_and_trailers() -> None:
    relayed = StatusError(
        grpc.StatusCode.ABORTED, "ahead (node 100)", (("xnode-cursor-bin", b"c"),)
    )
    assert await status(relayed) == (
        grpc.StatusCode.ABORTED,
        "ahead (node 100)",
        [("xnode-cursor-bin", b"c")],
    )


async def test_an_error_the_mapping_does_not_know_goes_through_unchanged() -> None:
    mapped = errors_mapped(Failing(KeyError("bug")), LOG_API, "logs", OUTAGE, LOG_STATUSES)
    with pytest.raises(KeyError):
        await mapped.GetCheckpoints(None, HttpContext((), "127.0.0.1"))


async def test_a_lost_store_is_told_to_the_outage_and_each_refusal_counted() -> None:
    """One `database_lost` for the outage, not one error per request; every request refused
    meanwhile counted as unavailable."""
    outage = DatabaseOutage(lambda: "10.0.0.2:5432")
    mapped = errors_mapped(Failing(StoreUnavailable("lost")), LOG_API, "logs", outage)
    labels = {"api": "logs", "method": "GetCheckpoints", "reason": "unavailable"}
    before = REGISTRY.get_sample_value("xnode_requests_rejected_total", labels) or 0
    with capture_logs() as logged:
        for _ in range(5):
            with pytest.raises(Aborted):
                await mapped.GetCheckpoints(None, HttpContext((), "127.0.0.1"))
    assert [e["event"] for e in logged if e["log_level"] != "debug"] == ["database_lost"]
    assert REGISTRY.get_sample_value("xnode_requests_rejected_total", labels) == before + 5
