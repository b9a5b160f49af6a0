"""Limiter maths (core.limits) and callers (usecases.limits)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from xnode.core.limits import (
    LEASE_SHARE,
    Kind,
    Limit,
    LimitExceeded,
    TokenBucket,
    lease_size,
    subject_of,
)
from xnode.usecases.limits import Caller


def test_bucket_admits_its_burst_then_says_when_to_retry() -> None:
    bucket = TokenBucket.full(Limit(rate=2, capacity=4), now_s=0)
    assert [bucket.take(1, 0) for _ in range(4)] == [0, 0, 0, 0]
    assert bucket.take(1, 0) == 0.5  # one token at 2 per second
    assert bucket.take(1, 0.5) == 0


@given(st.floats(0.1, 1e6), st.floats(1, 1e6), st.lists(st.floats(0, 1e3), max_size=50))
def test_bucket_never_admits_more_than_capacity_plus_refill(
    rate: float, capacity: float, costs: list[float]
) -> None:
    bucket = TokenBucket.full(Limit(rate, capacity), 0)
    admitted = sum(min(c, capacity) for c in costs if bucket.take(c, 1.0) == 0)
    assert admitted <= capacity + rate * 1.0 + 1e-6


def test_a_cost_above_the_capacity_waits_for_a_full_bucket() -> None:
    bucket = TokenBucket(Limit(1, 10), tokens=5, updated_s=0)
    assert bucket.take(50, 0) == 5.0
    assert bucket.take(50, 5) == 0


def test_lease_is_a_share_of_the_capacity_or_the_cost() -> None:
    limit = Limit(100, 1000)
    assert lease_size(limit, 1) == 1000 * LEASE_SHARE
    assert lease_size(limit, 500) == 500
    assert lease_size(limit, 5000) == 1000


def test_retry_hint_is_whole_seconds_at_least_one() -> None:
    assert LimitExceeded(Kind.BYTES, "ip:1.2.3.4", 0.2).retry_after_whole_s == 1
    assert LimitExceeded(Kind.BYTES, "ip:1.2.3.4", 2.1).retry_after_whole_s == 3
    assert "retry in 2.1 s" in str(LimitExceeded(Kind.BYTES, "ip:1.2.3.4", 2.1))


def test_caller_ip_from_grpc_peer_strings() -> None:
    assert Caller.from_peer("ipv4:10.0.0.7:5050").ip == "10.0.0.7"
    assert Caller.from_peer("ipv6:[::1]:5050").ip == "::1"
    assert Caller.from_peer("ipv4:10.0.0.7:1", node_id=200).subject == "node:200"
    assert Caller.from_peer(None).ip == "unknown"


def test_a_wait_under_a_tenth_of_a_second_is_not_shown_as_zero() -> None:
    assert "retry in 0.1 s" in str(LimitExceeded(Kind.ENVELOPES, "payer 0xab", 0.04))
    assert "retry in 0.2 s" in str(LimitExceeded(Kind.ENVELOPES, "payer 0xab", 0.11))


def test_the_refused_subject_is_read_back_from_its_bucket_key() -> None:
    assert subject_of("publish:payer:0xab:bytes") == "payer 0xab"
    assert subject_of("query:ip:10.0.0.1:requests") == "ip 10.0.0.1"
    assert subject_of("query:ip:2001:db8::1:requests") == "ip 2001:db8::1"
    assert subject_of("subscribe:ip:2001:db8::1") == "ip 2001:db8::1"
    assert subject_of("report:node:100") == "node 100"
