"""The HTTP port's stand-in for a gRPC context: what is left of a gRPC-web caller's deadline."""

from __future__ import annotations

import time

import pytest

from xnode.api.http import HttpContext, grpc_timeout_s


@pytest.mark.parametrize(
    ("header", "seconds"),
    [("5S", 5.0), ("250m", 0.25), ("2M", 120.0), ("1H", 3600.0), ("7u", 7e-6), ("3n", 3e-9)],
)
def test_a_grpc_timeout_is_read_in_seconds(header: str, seconds: float) -> None:
    assert grpc_timeout_s(header) == pytest.approx(seconds)


@pytest.mark.parametrize("header", ["", "S", "5", "5s", "-5S", "1.5S"])
def test_a_malformed_grpc_timeout_means_no_deadline(header: str) -> None:
    assert grpc_timeout_s(header) is None


def test_time_remaining_counts_down_from_the_callers_timeout() -> None:
    four_s_ago = time.monotonic() - 4.0
    context = HttpContext((("grpc-timeout", "10S"),), "127.0.0.1", started=four_s_ago)
    remaining = context.time_remaining()
    assert remaining is not None and 0.0 < remaining <= 6.0
    assert HttpContext((), "127.0.0.1").time_remaining() is None
