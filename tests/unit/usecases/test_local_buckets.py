"""LocalBuckets: the core token-bucket rules in one process's memory (the gateway's)."""

from __future__ import annotations

from xnode.core.limits import Charge, Kind, Limit
from xnode.usecases.limits import LocalBuckets


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def charges(count: int, size: int) -> list[Charge]:
    return [
        Charge("gateway:client:a:envelopes", Kind.ENVELOPES, count, Limit(1.0, 4.0)),
        Charge("gateway:client:a:bytes", Kind.BYTES, size, Limit(100.0, 1000.0)),
    ]


async def test_takes_until_empty_then_says_when_to_retry() -> None:
    clock = Clock()
    buckets = LocalBuckets(clock)
    assert await buckets.take(charges(4, 10)) is None
    refused = await buckets.take(charges(2, 10))
    assert refused is not None
    assert refused.kind is Kind.ENVELOPES
    assert refused.subject == "client a"
    assert refused.retry_after_s == 2.0
    clock.now += 2.0
    assert await buckets.take(charges(2, 10)) is None


async def test_a_refused_request_takes_nothing() -> None:
    buckets = LocalBuckets(Clock())
    assert await buckets.take(charges(1, 10)) is None
    # Envelopes fit; bytes do not (a cost above the capacity needs a full bucket).
    refused = await buckets.take(charges(1, 5000))
    assert refused is not None and refused.kind is Kind.BYTES
    assert await buckets.take(charges(3, 10)) is None  # the envelope was given back


async def test_spend_goes_past_empty() -> None:
    clock = Clock()
    buckets = LocalBuckets(clock)
    await buckets.spend(Charge("k:x:bytes", Kind.BYTES, 3000, Limit(100.0, 1000.0)))
    refused = await buckets.take([Charge("k:x:bytes", Kind.BYTES, 1, Limit(100.0, 1000.0))])
    assert refused is not None and refused.retry_after_s == 20.01
