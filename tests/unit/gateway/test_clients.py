"""Gateway clients: who they are (API keys), what they may publish, what they cost."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.core.fees import Fees
from xnode.core.limits import Kind, Limit, LimitExceeded, NeverFits
from xnode.gateway.clients import ClientAuth, Unauthenticated, parse_api_keys
from xnode.gateway.limits import ClientLimitPolicy, ClientLimits
from xnode.gateway.usage import UsageLog, usage_of, usage_table
from xnode.usecases.limits import LocalBuckets


def test_api_keys_parse_and_refuse_duplicates() -> None:
    assert parse_api_keys(" a=k1, b=k2 ,") == {"k1": "a", "k2": "b"}
    for bad in ("a", "a=", "=k", "a=k,b=k", "a=k,a=j"):
        with pytest.raises(ValueError):
            parse_api_keys(bad)


def test_clients_are_their_key_names_or_without_keys_their_ip() -> None:
    auth = ClientAuth({"k1": "alice"})
    assert auth.client_of([("authorization", "Bearer k1")], "1.2.3.4") == "alice"
    assert auth.client_of([("x-api-key", b"k1")], "unknown") == "alice"
    for metadata in ([], [("authorization", "Bearer k2")], [("authorization", "k1")]):
        with pytest.raises(Unauthenticated):
            auth.client_of(metadata, "1.2.3.4")
    assert ClientAuth({}).client_of([], "1.2.3.4") == "ip:1.2.3.4"


async def test_each_client_has_its_own_envelope_and_byte_buckets() -> None:
    policy = ClientLimitPolicy(envelopes=Limit(0.01, 3.0), bytes=Limit(1.0, 100.0))
    limits = ClientLimits(policy, LocalBuckets())
    await limits.publish("alice", [b"x"] * 3)
    with pytest.raises(LimitExceeded) as over:
        await limits.publish("alice", [b"x"])
    assert over.value.kind is Kind.ENVELOPES and over.value.subject == "client alice"
    await limits.publish("bob", [b"x"] * 3)
    await limits.publish("carol", [b"x" * 50])
    with pytest.raises(LimitExceeded) as too_big:
        await limits.publish("carol", [b"x" * 60])
    assert too_big.value.kind is Kind.BYTES
    off = ClientLimits(ClientLimitPolicy(Limit(0.01, 1.0), Limit(0.01, 1.0), False), LocalBuckets())
    await off.publish("alice", [b"x" * 1000] * 10)


async def test_a_daily_spending_cap_refuses_past_its_amount_and_never_fits_above_it() -> None:
    rate = Limit(1000.0, 1000.0)
    day = Limit(5 / 86_400, 5.0)
    policy = ClientLimitPolicy(rate, Limit(1e6, 1e6), daily_envelopes=day)
    limits = ClientLimits(policy, LocalBuckets())
    await limits.publish("alice", [b"x"] * 3)
    await limits.publish("alice", [b"x"] * 2)
    with pytest.raises(LimitExceeded) as over:
        await limits.publish("alice", [b"x"])
    assert over.value.subject == "daily-cap alice" and over.value.retry_after_s > 3600 / 360
    with pytest.raises(NeverFits) as never:
        await limits.publish("bob", [b"x"] * 6)
    assert "at most 5 envelopes" in str(never.value)
    await limits.publish("bob", [b"x"] * 5)  # the refusal took nothing


def _answer(fees: Fees) -> bytes:
    """An originator envelope as a node answers it, with these fees signed in."""
    unsigned = envelopes_pb2.UnsignedOriginatorEnvelope(
        originator_node_id=100,
        payer_envelope_bytes=envelopes_pb2.PayerEnvelope().SerializeToString(),
        base_fee_picodollars=fees.base,
        congestion_fee_picodollars=fees.congestion,
    )
    return envelopes_pb2.OriginatorEnvelope(
        unsigned_originator_envelope=unsigned.SerializeToString()
    ).SerializeToString()


def test_usage_sums_sent_bytes_and_the_signed_fees(tmp_path: Path) -> None:
    day = date(2026, 11, 23)
    usage = usage_of("alice", day, [b"ab", b"cde"], [_answer(Fees(5, 1)), _answer(Fees(7, 0))])
    assert (usage.envelopes, usage.bytes, usage.base_fee, usage.congestion_fee) == (2, 5, 12, 1)
    log = UsageLog(tmp_path / "usage.sqlite")
    log._add(usage)
    log._add(usage)
    log.close()
    reopened = UsageLog(tmp_path / "usage.sqlite")
    [row] = reopened.rows()
    assert (row.client, row.day, row.envelopes, row.bytes, row.fees) == (
        "alice", "2026-11-23", 4, 10, 26
    )  # fmt: skip
    assert "alice" in usage_table(reopened.rows())
