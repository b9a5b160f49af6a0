"""ApiLimits.publish: which buckets a publish draws from, for one envelope (the kept charges)
and for several."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from tests.unit.usecases.fakes import NODE, PAYER, payer_envelope
from xnode.core.crypto import address_of
from xnode.core.envelopes import ValidPayerEnvelope, validate_payer_envelope
from xnode.core.limits import Charge, Kind, Limit, LimitExceeded
from xnode.usecases.limits import ApiLimits, Caller, LimitPolicy

COUNT, SIZE = Limit(5.0, 10.0), Limit(500.0, 1000.0)
IP_COUNT, IP_SIZE = Limit(7.0, 14.0), Limit(700.0, 1400.0)
POLICY = LimitPolicy(
    COUNT, SIZE, IP_COUNT, IP_SIZE, COUNT, SIZE, COUNT, subscriptions_per_ip=1, reports=COUNT,
    peer_multiplier=10.0,
)  # fmt: skip
PAYER_KEY = f"publish:payer:0x{address_of(PAYER.public_key).hex()}"


class Recorded:
    def __init__(self) -> None:
        self.charges: list[list[Charge]] = []

    async def take(self, charges: Sequence[Charge]) -> LimitExceeded | None:
        self.charges.append(list(charges))
        return None

    async def spend(self, charge: Charge) -> None:
        return None


def _valid(data: bytes) -> ValidPayerEnvelope:
    return validate_payer_envelope(payer_envelope(data), NODE)


def _expected(subject: str, count: int, size: int, scale: float) -> list[Charge]:
    return [
        Charge(f"publish:{subject}:envelopes", Kind.ENVELOPES, count, IP_COUNT.scaled(scale)),
        Charge(f"publish:{subject}:bytes", Kind.BYTES, size, IP_SIZE.scaled(scale)),
        Charge(f"{PAYER_KEY}:envelopes", Kind.ENVELOPES, count, COUNT),
        Charge(f"{PAYER_KEY}:bytes", Kind.BYTES, size, SIZE),
    ]


async def test_one_envelope_draws_the_caller_and_payer_buckets_like_several_do() -> None:
    buckets = Recorded()
    limits = ApiLimits(POLICY, buckets)
    one, other = _valid(b"m0"), _valid(b"m1-longer")
    client, peer = Caller.from_peer("ipv4:10.0.0.1:5000"), Caller("10.0.0.2", node_id=7)
    await limits.publish(client, [one])
    await limits.publish(peer, [one])
    await limits.publish(client, [other])  # the same pair again: the kept names, its size
    await limits.publish(client, [one, other])
    assert buckets.charges == [
        _expected("ip:10.0.0.1", 1, len(one.raw), 1.0),
        _expected("node:7", 1, len(one.raw), 10.0),
        _expected("ip:10.0.0.1", 1, len(other.raw), 1.0),
        _expected("ip:10.0.0.1", 2, len(one.raw) + len(other.raw), 1.0),
    ]


@pytest.mark.parametrize("count", [1, 2])
async def test_denied_payers_are_refused_and_allowed_or_unlimited_ones_not_charged(
    count: int,
) -> None:
    payer = address_of(PAYER.public_key)
    envelopes = [_valid(b"m%d" % i) for i in range(count)]
    client = Caller("10.0.0.1")
    buckets = Recorded()
    denied = ApiLimits(replace(POLICY, denied_payers=frozenset({payer})), buckets)
    with pytest.raises(LimitExceeded) as refused:
        await denied.publish(client, envelopes)
    assert refused.value.kind is Kind.DENIED
    await ApiLimits(replace(POLICY, allowed_payers=frozenset({payer})), buckets).publish(
        client, envelopes
    )
    await ApiLimits(replace(POLICY, enabled=False), buckets).publish(client, envelopes)
    assert buckets.charges == []
