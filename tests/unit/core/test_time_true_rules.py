"""Payload rules that depend on time are judged at the envelope's own signed time, never at
the verifier's clock: a catch-up, a repair or an audit months later reaches the verdict the
originator reached at publish."""

from __future__ import annotations

import time

import pytest

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.client.node import key_package_envelope
from xnode.core import misbehavior
from xnode.core.constants import NS_PER_SECOND
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import build_payer_envelope, originate, validate_payer_envelope
from xnode.core.errors import Rejected
from xnode.core.evidence import why_unproven
from xnode.core.key_packages import LIFETIME_SKEW_S, STAMP_GRACE_S
from xnode.core.verification import InvalidEnvelope, RejectReason, verify_envelope

NODE = 100
KEY = SigningKey.generate()
PAYER = SigningKey.generate()
KEYS = {NODE: KEY.public_key}
INSTALLATION = bytes(range(32))
DAY_S = 86_400
LIFETIME_S = 90 * DAY_S  # what the official client gives its key packages


def key_package_payer(made_s: int) -> envelopes_pb2.PayerEnvelope:
    return build_payer_envelope(key_package_envelope(INSTALLATION, made_s, LIFETIME_S), PAYER, NODE)


def originated(made_s: int, stamped_s: int, sequence_id: int = 1) -> bytes:
    """A key package made at `made_s`, stamped by its originator at `stamped_s` (whether or
    not it held then: a dishonest originator signs what it likes)."""
    valid_when_made = validate_payer_envelope(key_package_payer(made_s), NODE, made_s)
    return originate(valid_when_made, NODE, sequence_id, stamped_s * NS_PER_SECOND, KEY).raw


@pytest.mark.parametrize("days_ago", [120, 200])
def test_a_key_package_valid_when_originated_is_accepted_any_day_later(days_ago: int) -> None:
    then = int(time.time()) - days_ago * DAY_S
    verdict = verify_envelope(originated(then - 60, then), KEYS, NODE)
    assert not isinstance(verdict, InvalidEnvelope), verdict.detail
    assert verdict.sequence_id == 1


def test_a_key_package_expired_when_originated_is_refused_and_judged_not_proven() -> None:
    """A key package's lifetime is an MLS rule (RFC 9420), xnode's own reading of payloads:
    refused, reported, and judged; only the rules every XIP-49 implementation shares prove."""
    then = int(time.time()) - 200 * DAY_S
    raw = originated(then - LIFETIME_S - DAY_S, then)
    verdict = verify_envelope(raw, KEYS, NODE)
    assert isinstance(verdict, InvalidEnvelope)
    assert verdict.reason is RejectReason.INVALID_PAYLOAD
    assert verdict.signed_by_originator
    assert "leaf_node.lifetime" in verdict.detail
    report = misbehavior.safety_report(misbehavior.INVALID_PAYLOAD, NODE, [raw], time.time_ns())
    failure = why_unproven(report, {NODE: [KEY.public_key]}) or ""
    assert "judged, not proven" in failure and "xnode-payloads (judged, epoch 1)" in failure


def test_a_report_against_an_honest_old_key_package_proves_nothing() -> None:
    then = int(time.time()) - 200 * DAY_S
    honest = originated(then - 60, then)
    report = misbehavior.safety_report(misbehavior.INVALID_PAYLOAD, NODE, [honest], time.time_ns())
    assert "every envelope passes" in (why_unproven(report, {NODE: [KEY.public_key]}) or "")


def test_a_key_package_not_yet_valid_when_originated_is_refused() -> None:
    then = int(time.time()) - 200 * DAY_S
    verdict = verify_envelope(originated(then + 2 * 3600, then), KEYS, NODE)
    assert isinstance(verdict, InvalidEnvelope)
    assert "leaf_node.lifetime" in verdict.detail


def test_what_an_originator_accepts_at_publish_no_verifier_refuses() -> None:
    """The originator checks a moment before it stamps: a key package it accepted must pass
    every verifier even when the stamp came later (a clock that stepped back, a slow batch)."""
    now = int(time.time())
    made = now - LIFETIME_S + STAMP_GRACE_S  # ends exactly STAMP_GRACE_S from now
    validate_payer_envelope(key_package_payer(made), NODE, now)
    stamped_late = originated(made, now + STAMP_GRACE_S + LIFETIME_SKEW_S)
    assert not isinstance(verify_envelope(stamped_late, KEYS, NODE), InvalidEnvelope)


def test_at_publish_a_key_package_about_to_expire_is_refused() -> None:
    now = int(time.time())
    made = now - LIFETIME_S + STAMP_GRACE_S - 1
    with pytest.raises(Rejected, match=r"leaf_node\.lifetime"):
        validate_payer_envelope(key_package_payer(made), NODE, now)


def test_verifiers_refuse_a_key_package_past_its_end_beyond_the_grace() -> None:
    then = int(time.time()) - 200 * DAY_S
    made = then - LIFETIME_S - LIFETIME_SKEW_S - 1
    verdict = verify_envelope(originated(made, then), KEYS, NODE)
    assert isinstance(verdict, InvalidEnvelope)
    assert "leaf_node.lifetime" in verdict.detail


def test_a_future_timestamp_report_proves_nothing_by_itself() -> None:
    """A timestamp too far ahead is judged against the receiver's clock at receipt; a report
    of it cannot prove that to anyone later, so it never counts as evidence alone."""
    now = int(time.time())
    previous = originated(now - 60, now, 1)
    ahead = originated(now - 60, now + DAY_S, 2)
    report = misbehavior.safety_report(
        misbehavior.OUT_OF_ORDER, NODE, [previous, ahead], time.time_ns()
    )
    assert why_unproven(report, {NODE: [KEY.public_key]}) is not None
