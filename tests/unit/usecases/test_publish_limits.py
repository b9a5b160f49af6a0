"""ApiLimits.publish: which buckets a publish draws from, for one envelope (the kept bucket
names) and for several, of one payer or of several."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from tests.unit.usecases.fakes import GROUP, NODE, PAYER, payer_envelope
from xnode.client.node import group_message_envelope
from xnode.core.crypto import SigningKey, address_of
from xnode.core.envelopes import ValidPayerEnvelope, build_payer_envelope, validate_payer_envelope
from xnode.core.limits import Charge, Kind, Limit, LimitExceeded, NeverFits
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


async def test_several_payers_charge_the_caller_the_total_then_each_payer_in_address_order() -> (
    None
):
    other_payer = SigningKey.generate()
    theirs = validate_payer_envelope(
        build_payer_envelope(group_message_envelope(GROUP, b"theirs", None), other_payer, NODE),
        NODE,
    )
    ours = [_valid(b"m0"), _valid(b"m1")]
    buckets = Recorded()
    await ApiLimits(POLICY, buckets).publish(Caller("10.0.0.1"), [ours[0], theirs, ours[1]])
    sizes = {
        PAYER_KEY: len(ours[0].raw) + len(ours[1].raw),
        f"publish:payer:0x{address_of(other_payer.public_key).hex()}": len(theirs.raw),
    }
    counts = {PAYER_KEY: 2}
    expected = _expected("ip:10.0.0.1", 3, sum(sizes.values()), 1.0)[:2]
    for key in sorted(sizes):  # address order: the same hex digits, the same order
        expected += [
            Charge(f"{key}:envelopes", Kind.ENVELOPES, counts.get(key, 1), COUNT),
            Charge(f"{key}:bytes", Kind.BYTES, sizes[key], SIZE),
        ]
    assert buckets.charges == [expected]


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


@pytest.mark.parametrize(
    ("count", "data", "kind", "split"),
    [
        (15, b"m", Kind.ENVELOPES, "at most 14 envelopes"),
        (1, b"x" * 1500, Kind.BYTES, "at most 1,400 bytes"),
    ],
)
async def test_a_request_costing_more_than_a_bucket_holds_never_fits_even_on_a_full_bucket(
    count: int, data: bytes, kind: Kind, split: str
) -> None:
    """15 envelopes against the caller's burst of 14; 1,500 bytes against its 1,400.
    Refused on fresh (full) buckets, taking nothing, with no retry hint but how to split."""
    buckets = Recorded()
    envelopes = [_valid(data + b"%d" % i) for i in range(count)]
    with pytest.raises(NeverFits) as refused:
        await ApiLimits(POLICY, buckets).publish(Caller("10.0.0.1"), envelopes)
    assert refused.value.kind is kind
    assert "can never pass" in str(refused.value) and split in str(refused.value)
    assert "retry" not in str(refused.value)
    assert buckets.charges == []
